"""``python -m sglang_pask.cpu_shim.bench_serving [flags]``: SGLang's own serving benchmark
(``sglang.benchmark.serving``) with every flag forwarded.

``sglang.benchmark.datasets`` imports HF ``datasets`` at module level for its MMMU loader; that
package (and pyarrow) is not part of the CPU install, so it gets an import stand-in here, in this
process only. Datasets that really need it (e.g. ``--dataset-name mmmu``) fail with an error
naming the call; ``random-ids`` and local-file datasets do not touch it.
"""

from __future__ import annotations

import runpy

from sglang_pask.cpu_shim import activate, add_standins

if __name__ == "__main__":
    activate()
    add_standins(("datasets",))
    runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
