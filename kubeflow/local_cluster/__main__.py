"""`python -m kubeflow.local_cluster up | status | down` (docs/kubeflow.md, "On one machine")."""

from __future__ import annotations

import argparse
import sys

from kubeflow.local_cluster import addons, cluster, node


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m kubeflow.local_cluster",
        description="A single-node Kubernetes cluster on this machine (root; Debian packages, "
        "Go): Kubernetes built from source, the Training Operator and Kubeflow Trainer, and "
        "with `up --kfp` Kubeflow Pipelines.",
    )
    parser.add_argument(
        "--root",
        default=node.default_root(),
        help="the cluster's folder: run/ (removed by down) and shared/ (kept)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="build what is missing, start the cluster, return")
    up.add_argument(
        "--image",
        default="",
        help="the project's image in podman's store to load into the node (built by "
        "kubeflow/build_images.sh --no-push), e.g. localhost/tfx-scaleout:TAG",
    )
    up.add_argument(
        "--operators",
        default=",".join(addons.OPERATOR_BUILDS),
        help="comma-separated: training-operator, jobset, trainer (trainer brings jobset); "
        "'none' for none",
    )
    up.add_argument(
        "--kfp",
        action="store_true",
        help="Kubeflow Pipelines 2.14.3 too (MariaDB, versitygw, the MLMD gRPC server, KFP's API "
        "server and persistence agent, Argo's workflow controller); on a cluster that is up, "
        "adds it",
    )
    load = commands.add_parser(
        "load", help="load the project's image (again, after a rebuild) into the running node"
    )
    load.add_argument("image", help="the image in podman's store, e.g. localhost/tfx-scaleout:TAG")
    commands.add_parser("status", help="kubeconfig, shared folder, image, one line per component")
    commands.add_parser("down", help="stop the cluster and remove what up made")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "up":
            operators = tuple(name for name in args.operators.split(",") if name and name != "none")
            unknown = sorted(set(operators) - set(addons.OPERATOR_BUILDS))
            if unknown:
                print(f"up: --operators: unknown {', '.join(unknown)}", file=sys.stderr)
                return 2
            cluster.up(cluster.UpOptions(args.root, args.image, operators, args.kfp))
            for line in cluster.status(args.root)[1]:
                print(line)
            return 0
        if args.command == "load":
            cluster.load(args.root, args.image)
            return 0
        if args.command == "status":
            is_up, lines = cluster.status(args.root)
            for line in lines:
                print(line)
            return 0 if is_up else 3
        cluster.down(args.root)
        return 0
    except cluster.ClusterError as error:
        print(f"{args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
