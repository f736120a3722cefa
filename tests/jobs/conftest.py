"""The real `ray start --head` fixture of test_ray_job_submit.py, for every module here (one head per module)."""

from tests.jobs.test_ray_job_submit import head  # noqa: F401
