"""cluster.yaml must pass Ray's own cluster-launcher validation, offline."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_passes_ray_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    cfg = prepare_config(raw)
    validate_config(cfg)  # raises on an invalid config
    assert set(cfg["available_node_types"]) == {"head", "cpu_worker"}
    assert cfg["head_node_type"] == "head"
    assert any("pip install" in c and "rise_batch" in c for c in cfg["setup_commands"])
    assert any("bubblewrap" in c for c in cfg["setup_commands"])


def test_every_node_gets_the_cluster_token_and_token_mode():
    """Ray >= 2.60 token auth: a worker without the head's token is refused when it joins. The launcher mounts one
    token file (this machine's, also read by `ray job submit`) on every node, and every `ray start` asks for token
    mode, so the head does not fall back to no authentication either."""
    from ray.autoscaler._private.util import prepare_config

    cfg = prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text()))
    home = f"/home/{cfg['auth']['ssh_user']}"
    assert cfg["file_mounts"].get(f"{home}/.ray/auth_token") == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cfg[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token ray start" in c for c in starts), (key, starts)


def test_example_job_configs_parse():
    from rise_batch.config import StructureConfig, build_section

    for path in sorted((ROOT / "jobs").glob("structure_*.yaml")):
        data = yaml.safe_load(path.read_text())["structure"]
        cfg = build_section(StructureConfig, data, "")
        cfg.llm.validate()
        assert cfg.backend in ("heuristic", "llm"), path


def test_ray_up_copies_no_outputs_to_the_nodes(tmp_path: Path) -> None:
    """The file mount of the working dir is an rsync with the filter Ray builds from cluster.yaml: run that exact
    rsync over a copy of the checkout holding outputs, and none of them reaches the 'node'."""
    import shutil
    import subprocess

    from ray.autoscaler._private.command_runner import SSHCommandRunner

    rsync = shutil.which("rsync")
    assert rsync, "rsync is what `ray up` copies the working dir with (.ci/system-deps installs it)"
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    src, dst = tmp_path / "checkout", tmp_path / "node"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "runs", "demo_out", "results", "*.egg-info"))
    (src / ".git").mkdir()
    for out in ("runs/struct/manifest.json", "demo_out/docmap.parquet", "bench/results/x.json"):
        (src / out).parent.mkdir(parents=True, exist_ok=True)
        (src / out).write_text("{}")
    args = SSHCommandRunner._create_rsync_filter_args(None, cfg)
    subprocess.run([rsync, "-a", *args, f"{src}/", f"{dst}/"], check=True)
    assert (dst / "rise_batch" / "cli.py").exists() and (dst / "cluster.yaml").exists()
    travelled = [p for p in ("runs", "demo_out", "bench/results", ".git") if (dst / p).exists()]
    assert travelled == []
