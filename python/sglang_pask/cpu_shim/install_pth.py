"""Write the ``.pth`` file that activates the CPU shim at every interpreter start in this venv.

``python -m sglang_pask.cpu_shim.install_pth`` (run by ``make install``). The file name sorts after
setuptools' ``__editable__*.pth``, so the package is importable when the line runs.
"""

from __future__ import annotations

import os
import sysconfig

PTH_NAME = "zz_sglang_pask_cpu_shim.pth"
PTH_LINE = "import sglang_pask.cpu_shim.boot\n"


def install(site_packages: str | None = None) -> str:
    site_packages = site_packages or sysconfig.get_paths()["purelib"]
    path = os.path.join(site_packages, PTH_NAME)
    with open(path, "w") as f:
        f.write(PTH_LINE)
    return path


if __name__ == "__main__":
    print(f"sglang_pask: CPU shim hook written to {install()}")
