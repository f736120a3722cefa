"""What a driver lends to a cluster's actors: the storage credentials and the named key variables it has, less
what a submitted job's runtime env sets already (Ray refuses to merge one variable set on both sides)."""

from __future__ import annotations

import json

from rise_batch.executor.ray import FORWARDED_ENV, forwarded_env


def test_set_names_travel_and_unset_or_unnamed_ones_do_not() -> None:
    environ = {"OPENAI_API_KEY": "k1", "MY_KEY": "k2", "AWS_ACCESS_KEY_ID": "a", "AWS_REGION": "", "HOME": "/root"}
    assert forwarded_env(("MY_KEY", "OPENAI_API_KEY"), environ) == {
        "AWS_ACCESS_KEY_ID": "a",
        "MY_KEY": "k2",
        "OPENAI_API_KEY": "k1",
    }
    assert "AWS_SECRET_ACCESS_KEY" in FORWARDED_ENV and forwarded_env((), {"HOME": "/root"}) == {}


def test_a_submitted_jobs_own_variables_are_left_to_it() -> None:
    job = {"runtime_env": {"env_vars": {"OPENAI_API_KEY": "from-job"}, "working_dir": "gcs://x.zip"}}
    environ = {"OPENAI_API_KEY": "from-job", "AWS_SESSION_TOKEN": "t", "RAY_JOB_CONFIG_JSON_ENV_VAR": json.dumps(job)}
    assert forwarded_env(("OPENAI_API_KEY",), environ) == {"AWS_SESSION_TOKEN": "t"}
