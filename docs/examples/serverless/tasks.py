"""The jobs of the serverless examples: an importable module, as child processes and
`corral worker` need."""

from corral import Job


def send_email(job: Job) -> dict[str, str]:
    if "@" not in job.data["to"]:
        raise ValueError(f"not an address: {job.data['to']!r}")
    return {"sent_to": job.data["to"]}
