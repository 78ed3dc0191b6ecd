"""tools/import_graph.py: a cycle between top-level folders fails `make lint`, naming its import lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "import_graph.py"


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A project laid out as this one: top-level folders, and lamplighter/<folder> links to them."""
    (root / "lamplighter").mkdir(parents=True)
    (root / "lamplighter" / "__init__.py").write_text("")
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(body)
        folder = rel.split("/")[0]
        link = root / "lamplighter" / folder
        if not link.exists():
            link.symlink_to(f"../{folder}")
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args, str(root)], capture_output=True, text=True, timeout=60)


def test_a_tree_without_a_cycle_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/policy.py": "import json\n",
            "adapter/run.py": "from lamplighter.core.policy import x\n",
            "cli/main.py": "def f():\n    import lamplighter.adapter.run\n",
        },
    )
    res = _run(root)
    assert res.returncode == 0, res.stderr
    assert "no cycle" in res.stdout
    graph = _run(root, "--text").stdout
    assert "adapter -> core (1)" in graph and "cli -> adapter (1)" in graph


def test_a_cycle_fails_naming_the_folders_and_the_import_lines(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/policy.py": "import json\n\n\ndef f():\n    from lamplighter.adapter.run import x\n",
            "adapter/run.py": "from lamplighter.core.policy import y\n",
            "cli/main.py": "from lamplighter.adapter import run\n",
        },
    )
    res = _run(root)
    assert res.returncode == 1
    assert "import cycle: adapter -> core -> adapter" in res.stderr
    assert "adapter/run.py:1: import lamplighter.core.policy" in res.stderr
    assert "core/policy.py:5: import lamplighter.adapter.run" in res.stderr
    assert "cli/main.py" not in res.stderr


def test_readme_architecture_graph_is_the_code_s() -> None:
    repo = TOOL.parents[1]
    graph = _run(repo, "--mermaid")
    assert graph.returncode == 0, graph.stderr
    assert graph.stdout.strip() in (repo / "docs" / "layout.md").read_text(), (
        "docs/layout.md's architecture graph is stale: paste `python tools/import_graph.py --mermaid`"
    )


def test_a_module_named_in_a_string_is_an_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/policy.py": "import importlib\n\n\ndef f():\n    return importlib.import_module('lamplighter.adapter.run')\n",
            "adapter/run.py": "from lamplighter.core.policy import y\nLOGGER = 'lamplighter.adapt'\n",
        },
    )
    res = _run(root)
    assert res.returncode == 1
    assert "import cycle: adapter -> core -> adapter" in res.stderr
    assert "core/policy.py:5: names lamplighter.adapter.run" in res.stderr


def test_the_product_may_not_reach_the_lab_even_without_a_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "lab/cluster.py": "import json\n",
            "slurm/chaos.py": "MODULES = ['lamplighter.lab.cluster']\n",
            "bench/run.py": "from lamplighter.lab.cluster import x\n",
        },
    )
    res = _run(root)
    assert res.returncode == 1
    assert "import cycle" not in res.stderr
    assert "slurm/chaos.py:1: names lamplighter.lab.cluster" in res.stderr
    assert "bench/run.py" not in res.stderr


def test_a_folder_importing_beyond_its_declared_layer_fails(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/__init__.py": '"""The core.\n\nMay import: nothing\n"""\n',
            "core/policy.py": "from lamplighter.util.x import y\n",
            "util/x.py": "import json\n",
            "adapter/__init__.py": '"""The adapter.\n\nMay import: core, util\n"""\n',
            "adapter/run.py": "from lamplighter.core.policy import y\nfrom lamplighter.util.x import z\n",
        },
    )
    res = _run(root)
    assert res.returncode == 1
    assert "import cycle" not in res.stderr
    assert "core/__init__.py does not allow importing util" in res.stderr
    assert "core/policy.py:1: import lamplighter.util.x" in res.stderr
    assert "adapter/run.py" not in res.stderr


def test_a_cycle_between_subfolders_of_one_folder_fails(tmp_path: Path) -> None:
    # The top-level graph cannot see it: both ends are in slurmish/.
    root = _tree(
        tmp_path,
        {
            "slurmish/api.py": "import json\n",
            "slurmish/job/render.py": "AGENT = 'lamplighter.slurmish.agent.main'\n",
            "slurmish/agent/main.py": "from lamplighter.slurmish.job.render import x\n",
        },
    )
    res = _run(root)
    assert res.returncode == 1
    assert "import cycle: slurmish/agent -> slurmish/job -> slurmish/agent" in res.stderr
    assert "slurmish/job/render.py:1: names lamplighter.slurmish.agent.main" in res.stderr


def test_a_subfolder_is_held_to_its_own_declared_imports(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "core/policy.py": "import json\n",
            "sup/loop.py": "from lamplighter.sup.head.loop import x\n",
            "sup/head/loop.py": "from lamplighter.core.policy import y\n",
        },
    )
    (root / "sup" / "head" / "__init__.py").write_text('"""head.\n\nMay import: sup\n"""\n')
    res = _run(root)
    assert res.returncode == 1
    assert "sup/head/__init__.py does not allow importing core:" in res.stderr
    assert "sup/head/loop.py:1: import lamplighter.core.policy" in res.stderr
    # The folder's own modules are held to the folder's line, which names its subfolders as folder/sub.
    (root / "sup" / "head" / "__init__.py").write_text('"""head.\n\nMay import: core\n"""\n')
    (root / "sup" / "__init__.py").write_text('"""sup.\n\nMay import: core\n"""\n')
    res = _run(root)
    assert res.returncode == 1 and "sup/__init__.py does not allow importing sup/head:" in res.stderr
    (root / "sup" / "__init__.py").write_text('"""sup.\n\nMay import: core, sup/head\n"""\n')
    assert _run(root).returncode == 0
