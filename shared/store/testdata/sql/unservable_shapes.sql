/* unservable: shapes */
SELECT DISTINCT shape FROM runs WHERE state = 'QUEUED' AND NOT wait_for_capacity
