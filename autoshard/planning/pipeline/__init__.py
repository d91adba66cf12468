"""Pipeline parallelism: schedules, their simulated timeline, stage boundaries and memory."""
