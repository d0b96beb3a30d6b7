"""A dead-letter queue: jobs that failed for good are copied there with their history, then
looked at and replayed into the queue they failed in."""

from corral import DeadLetterQueue, Queue, Worker

calls = {"charge": 0}


def charge(job):
    calls["charge"] += 1
    if calls["charge"] <= 2:  # the payment service is down for the first run
        raise ConnectionError(f"payment service down (call {calls['charge']})")
    return {"charged": job.data["cents"]}


with (
    Queue("payments", dead_letter_queue="payments-dead") as payments,
    DeadLetterQueue("payments-dead") as dlq,
):
    # Start empty: the embedded server keeps the last run's jobs and dead letters.
    payments.obliterate(force=True)
    dlq.purge()

    job = payments.add("charge", {"cents": 1250}, attempts=2, remove_on_fail=True)
    Worker("payments", charge).run(burst=True)  # fails twice: no attempts left
    print("still stored:", payments.get_job(job.id) is not None)

    [letter] = dlq.get_dead_letters()
    print(f"dead letter {letter.id}: {letter.queue}/{letter.job_id} {letter.failed_reason}")
    print("attempts:", letter.attempts_made, "stacks:", len(letter.data["stacktrace"]))

    replay = dlq.replay(letter.id)  # back into payments, as a new job
    print("replayed as:", replay.job_id, "again:", dlq.replay(letter.id).already)
    Worker("payments", charge).run(burst=True)
    print("result:", payments.get_job(replay.job_id).returnvalue)
    print("replay of:", payments.get_job(replay.job_id).opts["x-replay-of"])
    print("purged:", dlq.purge())
