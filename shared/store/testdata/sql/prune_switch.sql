/* reap: prune switch */
SELECT set_config('mediator.pruning', 'on', true)
