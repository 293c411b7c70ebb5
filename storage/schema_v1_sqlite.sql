-- spectower schema v1 (the first released schema), SQLite DDL, frozen: only tests use it
-- to build an old database file and prove that open_database() migrates it forward.

CREATE TABLE bench_run (
	id INTEGER NOT NULL, 
	created_at FLOAT NOT NULL, 
	source VARCHAR NOT NULL, 
	tag VARCHAR, 
	server_url VARCHAR, 
	backend VARCHAR, 
	dataset_name VARCHAR, 
	served_model_name VARCHAR, 
	sglang_version VARCHAR, 
	server_info_json VARCHAR, 
	gpu_inventory_json VARCHAR, 
	params_json VARCHAR, 
	crossover FLOAT, 
	crossover_lo FLOAT, 
	crossover_hi FLOAT, 
	best_max_bs INTEGER, 
	PRIMARY KEY (id)
);

CREATE TABLE collection_gap (
	id INTEGER NOT NULL, 
	source VARCHAR NOT NULL, 
	target VARCHAR NOT NULL, 
	start_ts FLOAT NOT NULL, 
	end_ts FLOAT, 
	reason VARCHAR NOT NULL, 
	PRIMARY KEY (id)
);

CREATE TABLE collector_health (
	id INTEGER NOT NULL, 
	source VARCHAR NOT NULL, 
	target VARCHAR NOT NULL, 
	updated_ts FLOAT NOT NULL, 
	last_success_ts FLOAT, 
	errors_total INTEGER NOT NULL, 
	last_error VARCHAR, 
	lag_s FLOAT, 
	PRIMARY KEY (id), 
	UNIQUE (source, target)
);

CREATE TABLE control_event (
	id INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	actor VARCHAR NOT NULL, 
	server_url VARCHAR NOT NULL, 
	action VARCHAR NOT NULL, 
	old_max_bs INTEGER, 
	new_max_bs INTEGER, 
	reason VARCHAR NOT NULL, 
	confirmed BOOLEAN NOT NULL, 
	per_rank_json VARCHAR, 
	error VARCHAR, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_control_event_server_ts ON control_event (server_url, ts);

CREATE TABLE gpu (
	id INTEGER NOT NULL, 
	host VARCHAR NOT NULL, 
	"index" INTEGER NOT NULL, 
	uuid VARCHAR NOT NULL, 
	name VARCHAR, 
	memory_total_mib FLOAT, 
	power_limit_w FLOAT, 
	driver_version VARCHAR, 
	cuda_version VARCHAR, 
	source VARCHAR NOT NULL, 
	first_seen FLOAT NOT NULL, 
	last_seen FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (host, uuid)
);

CREATE TABLE meta (
	"key" VARCHAR NOT NULL, 
	value VARCHAR NOT NULL, 
	PRIMARY KEY ("key")
);

CREATE TABLE policy_state (
	server_url VARCHAR NOT NULL, 
	updated_ts FLOAT NOT NULL, 
	mode VARCHAR NOT NULL, 
	paused_until FLOAT, 
	state_json VARCHAR NOT NULL, 
	PRIMARY KEY (server_url)
);

CREATE TABLE server (
	id INTEGER NOT NULL, 
	url VARCHAR NOT NULL, 
	served_model_name VARCHAR, 
	sglang_version VARCHAR, 
	launch_command VARCHAR, 
	max_running_requests INTEGER, 
	speculative_algorithm VARCHAR, 
	first_seen FLOAT NOT NULL, 
	last_seen FLOAT NOT NULL, 
	PRIMARY KEY (id)
);

CREATE UNIQUE INDEX ix_server_url ON server (url);

CREATE TABLE bench_point (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	concurrency FLOAT, 
	spec_on BOOLEAN, 
	request_rate FLOAT, 
	completed INTEGER, 
	duration_s FLOAT, 
	total_input_tokens INTEGER, 
	total_output_tokens INTEGER, 
	request_throughput FLOAT, 
	input_throughput FLOAT, 
	output_throughput FLOAT, 
	total_throughput FLOAT, 
	mean_ttft_ms FLOAT, 
	median_ttft_ms FLOAT, 
	p90_ttft_ms FLOAT, 
	p99_ttft_ms FLOAT, 
	mean_tpot_ms FLOAT, 
	median_tpot_ms FLOAT, 
	p90_tpot_ms FLOAT, 
	p99_tpot_ms FLOAT, 
	mean_itl_ms FLOAT, 
	median_itl_ms FLOAT, 
	p90_itl_ms FLOAT, 
	p99_itl_ms FLOAT, 
	mean_e2e_latency_ms FLOAT, 
	median_e2e_latency_ms FLOAT, 
	p90_e2e_latency_ms FLOAT, 
	p99_e2e_latency_ms FLOAT, 
	accept_length FLOAT, 
	ratio_ci_lo FLOAT, 
	ratio_ci_hi FLOAT, 
	extra_json VARCHAR, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES bench_run (id)
);

CREATE INDEX ix_bench_point_run ON bench_point (run_id, concurrency);

CREATE TABLE engine_sample (
	id INTEGER NOT NULL, 
	server_id INTEGER NOT NULL, 
	dp_rank INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	num_running_reqs FLOAT, 
	num_queue_reqs FLOAT, 
	gen_throughput FLOAT, 
	output_tok_s FLOAT, 
	prefill_tok_s FLOAT, 
	request_rate FLOAT, 
	token_usage FLOAT, 
	cache_hit_rate FLOAT, 
	spec_accept_length FLOAT, 
	spec_accept_rate FLOAT, 
	spec_num_steps FLOAT, 
	spec_max_bs INTEGER, 
	batches_drafted INTEGER, 
	batches_gated INTEGER, 
	ttft_p50_s FLOAT, 
	ttft_p90_s FLOAT, 
	ttft_p99_s FLOAT, 
	itl_p50_s FLOAT, 
	itl_p90_s FLOAT, 
	itl_p99_s FLOAT, 
	e2e_p50_s FLOAT, 
	e2e_p90_s FLOAT, 
	e2e_p99_s FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(server_id) REFERENCES server (id)
);

CREATE INDEX ix_engine_sample_server_ts ON engine_sample (server_id, ts);

CREATE TABLE gpu_process_sample (
	id INTEGER NOT NULL, 
	gpu_id INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	pid INTEGER NOT NULL, 
	process_name VARCHAR, 
	used_memory_mib FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(gpu_id) REFERENCES gpu (id)
);

CREATE INDEX ix_gpu_process_sample_gpu_ts ON gpu_process_sample (gpu_id, ts);

CREATE TABLE gpu_sample (
	id INTEGER NOT NULL, 
	gpu_id INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	lost BOOLEAN NOT NULL, 
	gpu_util_pct FLOAT, 
	mem_util_pct FLOAT, 
	memory_used_mib FLOAT, 
	memory_total_mib FLOAT, 
	power_w FLOAT, 
	power_limit_w FLOAT, 
	temperature_c FLOAT, 
	sm_clock_mhz FLOAT, 
	mem_clock_mhz FLOAT, 
	pcie_tx_bytes_s FLOAT, 
	pcie_rx_bytes_s FLOAT, 
	nvlink_tx_bytes_s FLOAT, 
	nvlink_rx_bytes_s FLOAT, 
	throttle_reasons INTEGER, 
	ecc_corrected INTEGER, 
	ecc_uncorrected INTEGER, 
	xid_errors INTEGER, 
	PRIMARY KEY (id), 
	FOREIGN KEY(gpu_id) REFERENCES gpu (id)
);

CREATE INDEX ix_gpu_sample_gpu_ts ON gpu_sample (gpu_id, ts);

CREATE TABLE server_info_snapshot (
	id INTEGER NOT NULL, 
	server_id INTEGER NOT NULL, 
	ts FLOAT NOT NULL, 
	info_hash VARCHAR NOT NULL, 
	info_json VARCHAR NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(server_id) REFERENCES server (id)
);

CREATE INDEX ix_server_info_snapshot_server_id ON server_info_snapshot (server_id);
