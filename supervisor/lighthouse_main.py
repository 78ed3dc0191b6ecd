"""The Lighthouse's old module path, for Lighthouse jobs rendered before supervisor/lighthouse/ existed.

Their sbatch scripts run `python -m lamplighter.supervisor.lighthouse_main`; a job that renews or is
requeued across an upgrade must still find its Lighthouse. New scripts name supervisor.lighthouse.lighthouse_main.
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("lamplighter.supervisor.lighthouse.lighthouse_main", run_name="__main__", alter_sys=True)
