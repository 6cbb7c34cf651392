INSERT INTO builds (commit_id, status, log, runner_hash, started_at, duration_ms, host, tree, repro,
	runner_host, runner_cuda, host_hash, cuda_hash)
VALUES ($1, $2, $3, $4, to_timestamp($5), $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (commit_id) DO UPDATE SET status = EXCLUDED.status, log = EXCLUDED.log,
runner_hash = EXCLUDED.runner_hash, started_at = EXCLUDED.started_at,
duration_ms = EXCLUDED.duration_ms, host = EXCLUDED.host, tree = EXCLUDED.tree,
repro = EXCLUDED.repro, runner_host = EXCLUDED.runner_host, runner_cuda = EXCLUDED.runner_cuda,
host_hash = EXCLUDED.host_hash, cuda_hash = EXCLUDED.cuda_hash
