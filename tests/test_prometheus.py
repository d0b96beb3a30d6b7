"""The Prometheus text export of job counts."""

from __future__ import annotations

import redis

from corral import Queue
from corral.prometheus import export_text


def test_export_counts_per_queue_and_state(redis_url: str, r: redis.Redis) -> None:
    with Queue("emails", connection=redis_url) as emails, Queue("pdf", connection=redis_url) as pdf:
        emails.add("a")
        emails.add("b", delay=60)
        pdf.add("c", priority=3)
        pdf.pause()
        text = export_text([emails, pdf])
    lines = set(text.splitlines())
    assert 'corral_queue_jobs{queue="emails",state="waiting"} 1.0' in lines
    assert 'corral_queue_jobs{queue="emails",state="delayed"} 1.0' in lines
    assert 'corral_queue_jobs{queue="pdf",state="prioritized"} 1.0' in lines
    assert 'corral_queue_jobs{queue="pdf",state="completed"} 0.0' in lines
    assert 'corral_queue_paused{queue="emails"} 0.0' in lines
    assert 'corral_queue_paused{queue="pdf"} 1.0' in lines
    assert "# TYPE corral_queue_jobs gauge" in lines
