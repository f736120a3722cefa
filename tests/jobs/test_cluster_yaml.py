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
