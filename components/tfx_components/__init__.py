"""The custom TFX components: sharded CSV and image ExampleGens, the sharded Transform
executor, the failing ExampleValidator and the previous-blessed baseline resolver."""
