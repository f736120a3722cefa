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


def test_example_job_configs_parse():
    from rise_batch.config import StructureConfig, build_section

    for path in sorted((ROOT / "jobs").glob("structure_*.yaml")):
        data = yaml.safe_load(path.read_text())["structure"]
        cfg = build_section(StructureConfig, data, "")
        cfg.llm.validate()
        assert cfg.backend in ("heuristic", "llm"), path
