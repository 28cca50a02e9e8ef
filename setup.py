"""sglang_pask: parser-aware, structure-conditioned KV persistence (PASK) for SGLang.

On CPU machines install with `make install` (pinned set, --no-deps; see requirements/).
On CUDA machines: `pip install -e .[gpu]` installs SGLang with its normal dependencies.
"""

from setuptools import find_packages, setup

setup(
    name="sglang_pask",
    version="0.1.0",
    description="Parser-aware, structure-conditioned KV persistence for structured generation (SGLang plugin)",
    package_dir={"": "python"},
    packages=find_packages("python"),
    python_requires=">=3.10",
    # Core runtime dependencies are pinned in requirements/cpu.txt and installed with --no-deps by
    # `make install`; declaring them here would let pip resolve torch to a CUDA build.
    install_requires=[],
    extras_require={
        # For CUDA machines: SGLang with its normal dependency set (not exercisable on CPU).
        "gpu": ["sglang==0.5.23", "xgrammar==0.2.8"],
    },
    entry_points={
        "console_scripts": ["pask = sglang_pask.cli:main"],
        "sglang.srt.plugins": ["pask = sglang_pask.srt.plugin:register"],
    },
)
