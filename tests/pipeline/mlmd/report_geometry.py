"""The report's lineage drawing measured in headless Chromium (Debian's chromium package).

The report has no scripts; a copy of it gets one, appended at the end of the body, that measures
the laid-out SVG as the browser renders it: each node's box (getBBox), each edge's path sampled
every pixel along its length (getPointAtLength). It writes what it found into the DOM, which
`--dump-dom` returns. Checked: no two boxes overlap; no edge passes through a box other than the
two it joins.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# An edge leaves and enters its own boxes; a sample point closer than this to another box's
# border still counts as outside it (anti-aliasing, rounding of the layout's coordinates).
TOLERANCE_PX = 0.5

MEASURE_SCRIPT = """
<script>
(function () {
  const groups = Array.from(document.querySelectorAll('svg g.node, svg g.artifact'));
  const boxes = groups.map(function (g) {
    const b = g.querySelector('rect.box').getBBox();
    return {id: g.dataset.id, x: b.x, y: b.y, w: b.width, h: b.height};
  });
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h) {
        overlaps.push([a.id, b.id]);
      }
    }
  }
  const crossings = [];
  const edges = Array.from(document.querySelectorAll('svg path.edge'));
  edges.forEach(function (path) {
    const length = path.getTotalLength();
    const ends = [path.dataset.tail, path.dataset.head];
    const hit = {};
    for (let s = 0; s <= length; s += 1) {
      const p = path.getPointAtLength(s);
      boxes.forEach(function (b) {
        if (ends.indexOf(b.id) >= 0) return;
        const t = TOLERANCE;
        if (p.x > b.x + t && p.x < b.x + b.w - t && p.y > b.y + t && p.y < b.y + b.h - t) {
          hit[b.id] = true;
        }
      });
    }
    Object.keys(hit).forEach(function (id) { crossings.push([ends[0], ends[1], id]); });
  });
  const out = document.createElement('pre');
  out.id = 'geometry';
  out.textContent = JSON.stringify(
    {boxes: boxes.length, edges: edges.length, overlaps: overlaps, crossings: crossings});
  document.body.appendChild(out);
})();
</script>
"""


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "tests that draw need @pytest.mark.system_packages('chromium')"
    return found


def measure(report_path, work_dir) -> dict:
    """{"boxes", "edges", "overlaps": [[box, box]], "crossings": [[tail, head, box]]}."""
    page = report_path.read_text()
    script = MEASURE_SCRIPT.replace("TOLERANCE", str(TOLERANCE_PX))
    measured = work_dir / "measured.html"
    measured.write_text(page.replace("</body>", script + "</body>"))
    dom = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={work_dir / 'geometry-profile'}",
            "--dump-dom",
            measured.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="geometry">(.*?)</pre>', dom.stdout, re.S)
    assert found, "the measuring script did not run"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def screenshot(report_path, work_dir, size: str = "1300,1800") -> tuple[int, str]:
    """(PNG size in bytes, chromium's stderr) of the report rendered headless."""
    shot = work_dir / "report.png"
    result = subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={work_dir / 'screenshot-profile'}",
            f"--window-size={size}",
            f"--screenshot={shot}",
            report_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return shot.stat().st_size, result.stderr
