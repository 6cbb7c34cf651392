/*
 * Unit tests for daemon/config.c: every option, the defaults, and the exact
 * message a user gets for each kind of mistake, on real files in /tmp.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "gpus.h"

/* The smallest valid file: the two required options. */
#define MINIMAL                                                                                              \
	"[repository]\n"                                                                                     \
	"url = https://github.com/example/demo-kernels.git\n"                                                \
	"[build]\n"                                                                                          \
	"command = make\n"

struct conf_file {
	char path[64];
};

/* Writes 'len' bytes of 'text' to a new temporary file. */
static void conf_write_len(struct conf_file *f, const char *text, size_t len)
{
	FILE *fp;
	int fd;

	snprintf(f->path, sizeof(f->path), "/tmp/nw_test_config_XXXXXX");
	fd = mkstemp(f->path);
	assert_true(fd >= 0);
	fp = fdopen(fd, "w");
	assert_non_null(fp);
	assert_int_equal(fwrite(text, 1, len, fp), len);
	assert_int_equal(fclose(fp), 0);
}

static void conf_write(struct conf_file *f, const char *text)
{
	conf_write_len(f, text, strlen(text));
}

/*
 * Loads 'text'; on failure checks that cfg came back zeroed and that the
 * message is "PATH:" followed by 'expect' (NULL: the load must succeed).
 */
static int load_text_len(const char *text, size_t len, struct config *cfg, const char *expect)
{
	static const struct config zero;
	struct conf_file f;
	char err[512], want[600];
	int r;

	conf_write_len(&f, text, len);
	memset(err, 'x', sizeof(err));
	r = config_load(cfg, f.path, err, sizeof(err));
	unlink(f.path);
	if (!expect) {
		if (r != 0)
			print_error("unexpected error: %s\n", err);
		assert_int_equal(r, 0);
		return r;
	}
	assert_int_not_equal(r, 0);
	assert_true(memcmp(cfg, &zero, sizeof(zero)) == 0);
	snprintf(want, sizeof(want), "%s:%s", f.path, expect);
	assert_string_equal(err, want);
	return r;
}

static int load_text(const char *text, struct config *cfg, const char *expect)
{
	return load_text_len(text, strlen(text), cfg, expect);
}

/* Loads MINIMAL plus 'extra' appended (which may open sections of its own). */
static int load_extra(const char *extra, struct config *cfg, const char *expect)
{
	char text[8192];

	snprintf(text, sizeof(text), "%s%s", MINIMAL, extra);
	return load_text(text, cfg, expect);
}

static void test_defaults(void **state)
{
	struct config cfg;
	char host[256] = "";

	load_text(MINIMAL, &cfg, NULL);
	assert_string_equal(cfg.state_dir, "/var/lib/numwatch");
	assert_string_equal(cfg.database, "dbname=numwatch");
	gethostname(host, sizeof(host) - 1);
	assert_string_equal(cfg.node_name, host);
	assert_int_equal(cfg.lease_s, 300);

	assert_string_equal(cfg.repo_name, "demo-kernels");
	assert_string_equal(cfg.repo_url, "https://github.com/example/demo-kernels.git");
	assert_string_equal(cfg.repo_branch, "main");
	assert_int_equal(cfg.poll_interval_s, 30);
	assert_int_equal(cfg.history_max, 500);

	assert_string_equal(cfg.build_command, "make");
	assert_int_equal(cfg.build_timeout_s, 1800);
	assert_string_equal(cfg.runner_host, "numwatch-runner-host");
	assert_string_equal(cfg.runner_cuda, "numwatch-runner-cuda");
	assert_int_equal(cfg.build_log_max, 262144);

	assert_int_equal(cfg.trials_per_commit, 64);
	assert_int_equal(cfg.trial_timeout_s, 60);
	assert_int_equal(cfg.repeats, 2);
	assert_int_equal(cfg.hello_timeout_s, 30);

	assert_int_equal(cfg.nslots, 1);
	assert_string_equal(cfg.slots[0].name, "host");
	assert_int_equal(cfg.slots[0].gpu, -1);

	assert_string_equal(cfg.http_address, "127.0.0.1");
	assert_int_equal(cfg.http_port, 8080);
	assert_non_null(cfg.web_root);
	assert_int_equal(cfg.web_root[0], '/');
	assert_string_equal(cfg.public_url, "http://127.0.0.1:8080");
	config_release(&cfg);
	assert_null(cfg.state_dir);
}

static void test_every_option(void **state)
{
	struct config cfg;

	load_text("[daemon]\n"
		  "state_dir = /srv/numwatch\n"
		  "database = host=/run/postgresql dbname=nw user=nw\n"
		  "node_name = gpu-box-7\n"
		  "lease = 120\n"
		  "\n"
		  "[repository]\n"
		  "name = kernels\n"
		  "url = /srv/git/lib\n"
		  "branch = release/2.x\n"
		  "poll_interval = 15\n"
		  "history_max = 2000\n"
		  "\n"
		  "[build]\n"
		  "command = cmake -S . -B \"$NUMWATCH_BUILD_DIR\" && cmake --build \"$NUMWATCH_BUILD_DIR\"\n"
		  "timeout = 3600\n"
		  "runner_host = bin/runner-cpu\n"
		  "runner_cuda = bin/runner-gpu\n"
		  "log_max = 65536\n"
		  "\n"
		  "[trials]\n"
		  "per_commit = 200\n"
		  "timeout = 90\n"
		  "repeats = 3\n"
		  "hello_timeout = 45\n"
		  "\n"
		  "[slots]\n"
		  "slots = 1, 0, host\n"
		  "\n"
		  "[http]\n"
		  "address = 0.0.0.0\n"
		  "port = 9090\n"
		  "web_root = /opt/numwatch/web\n"
		  "public_url = https://numwatch.example.org/\n",
		  &cfg, NULL);
	assert_string_equal(cfg.state_dir, "/srv/numwatch");
	assert_string_equal(cfg.database, "host=/run/postgresql dbname=nw user=nw");
	assert_string_equal(cfg.node_name, "gpu-box-7");
	assert_int_equal(cfg.lease_s, 120);
	assert_string_equal(cfg.repo_name, "kernels");
	assert_string_equal(cfg.repo_url, "/srv/git/lib");
	assert_string_equal(cfg.repo_branch, "release/2.x");
	assert_int_equal(cfg.poll_interval_s, 15);
	assert_int_equal(cfg.history_max, 2000);
	assert_string_equal(cfg.build_command,
			    "cmake -S . -B \"$NUMWATCH_BUILD_DIR\" && cmake --build \"$NUMWATCH_BUILD_DIR\"");
	assert_int_equal(cfg.build_timeout_s, 3600);
	assert_string_equal(cfg.runner_host, "bin/runner-cpu");
	assert_string_equal(cfg.runner_cuda, "bin/runner-gpu");
	assert_int_equal(cfg.build_log_max, 65536);
	assert_int_equal(cfg.trials_per_commit, 200);
	assert_int_equal(cfg.trial_timeout_s, 90);
	assert_int_equal(cfg.repeats, 3);
	assert_int_equal(cfg.hello_timeout_s, 45);
	assert_int_equal(cfg.nslots, 3);
	assert_string_equal(cfg.slots[0].name, "gpu1");
	assert_int_equal(cfg.slots[0].gpu, 1);
	assert_string_equal(cfg.slots[1].name, "gpu0");
	assert_int_equal(cfg.slots[1].gpu, 0);
	assert_string_equal(cfg.slots[2].name, "host");
	assert_int_equal(cfg.slots[2].gpu, -1);
	assert_string_equal(cfg.http_address, "0.0.0.0");
	assert_int_equal(cfg.http_port, 9090);
	assert_string_equal(cfg.web_root, "/opt/numwatch/web");
	/* The trailing slash goes: links are built as public_url + "/...". */
	assert_string_equal(cfg.public_url, "https://numwatch.example.org");
	config_release(&cfg);
}

static void test_public_url_default(void **state)
{
	struct config cfg;
	char want[300], host[256] = "";

	load_extra("[http]\naddress = 10.1.2.3\nport = 8443\n", &cfg, NULL);
	assert_string_equal(cfg.public_url, "http://10.1.2.3:8443");
	config_release(&cfg);

	/* A wildcard address is not reachable: links name the node instead. */
	load_extra("[daemon]\nnode_name = box1\n[http]\naddress = 0.0.0.0\n", &cfg, NULL);
	assert_string_equal(cfg.public_url, "http://box1:8080");
	config_release(&cfg);

	load_extra("[http]\naddress = 0.0.0.0\n", &cfg, NULL);
	gethostname(host, sizeof(host) - 1);
	snprintf(want, sizeof(want), "http://%s:8080", host);
	assert_string_equal(cfg.public_url, want);
	config_release(&cfg);
}

static void test_repo_name_from_url(void **state)
{
	static const struct {
		const char *url, *name;
	} cases[] = {
	    {"https://github.com/org/flash-attn.git", "flash-attn"},
	    {"https://github.com/org/flash-attn", "flash-attn"},
	    {"/srv/git/msda/", "msda"},
	    {"git@github.com:org/lib.git", "lib"},
	    {"host:lib", "lib"},
	};
	struct config cfg;
	char text[512];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(text, sizeof(text), "[repository]\nurl = %s\n[build]\ncommand = make\n",
			 cases[i].url);
		load_text(text, &cfg, NULL);
		assert_string_equal(cfg.repo_name, cases[i].name);
		config_release(&cfg);
	}
}

static void test_durations(void **state)
{
	static const struct {
		const char *value;
		unsigned seconds;
	} ok[] = {
	    {"45", 45}, {"30s", 30}, {"5m", 300}, {"2h", 7200}, {"24h", 86400}, {"0090", 90},
	};
	struct config cfg;
	char text[256];
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text), "[repository]\npoll_interval = %s\n", ok[i].value);
		load_extra(text, &cfg, NULL);
		assert_int_equal(cfg.poll_interval_s, ok[i].seconds);
		config_release(&cfg);
	}
	load_extra("[trials]\ntimeout = 1m\nhello_timeout = 10s\n[build]\ntimeout=2h\n", &cfg, NULL);
	assert_int_equal(cfg.trial_timeout_s, 60);
	assert_int_equal(cfg.hello_timeout_s, 10);
	assert_int_equal(cfg.build_timeout_s, 7200);
	config_release(&cfg);

	/* MINIMAL is 4 lines, the section header line 5, the key line 6. */
	load_extra("[repository]\npoll_interval = abc\n", &cfg,
		   "6: invalid value 'abc' for 'poll_interval': expected a positive integer");
	load_extra("[repository]\npoll_interval = 5x\n", &cfg,
		   "6: invalid value '5x' for 'poll_interval': expected a positive integer");
	load_extra("[repository]\npoll_interval = 5 m\n", &cfg,
		   "6: invalid value '5 m' for 'poll_interval': expected a positive integer");
	load_extra("[repository]\npoll_interval = 0s\n", &cfg,
		   "6: invalid value '0s' for 'poll_interval': expected a positive integer");
	load_extra("[repository]\npoll_interval = m\n", &cfg,
		   "6: invalid value 'm' for 'poll_interval': expected a positive integer");
	load_extra("[repository]\npoll_interval = 25h\n", &cfg,
		   "6: invalid value '25h' for 'poll_interval': expected from 1 to 86400 seconds");
	/*
	 * 5124095576030432 hours is 2^64 + 3584 seconds: a multiplication that
	 * wrapped would accept it as an hour. It must be refused.
	 */
	load_extra(
	    "[repository]\npoll_interval = 5124095576030432h\n", &cfg,
	    "6: invalid value '5124095576030432h' for 'poll_interval': expected from 1 to 86400 seconds");
	load_extra(
	    "[repository]\npoll_interval = 307445734561825861m\n", &cfg,
	    "6: invalid value '307445734561825861m' for 'poll_interval': expected from 1 to 86400 seconds");
	load_extra("[daemon]\nlease = 5\n", &cfg,
		   "6: invalid value '5' for 'lease': expected from 10 to 604800 seconds");
}

static void test_integers(void **state)
{
	struct config cfg;

	load_extra("[trials]\nrepeats = 100\nper_commit = 100000\n[http]\nport = 65535\n", &cfg, NULL);
	assert_int_equal(cfg.repeats, 100);
	assert_int_equal(cfg.trials_per_commit, 100000);
	assert_int_equal(cfg.http_port, 65535);
	config_release(&cfg);

	load_extra("[trials]\nrepeats = 101\n", &cfg,
		   "6: invalid value '101' for 'repeats': expected an integer from 1 to 100");
	load_extra("[trials]\nrepeats = 0\n", &cfg,
		   "6: invalid value '0' for 'repeats': expected a positive integer");
	load_extra("[trials]\nrepeats = -1\n", &cfg,
		   "6: invalid value '-1' for 'repeats': expected a positive integer");
	load_extra("[trials]\nrepeats = +2\n", &cfg,
		   "6: invalid value '+2' for 'repeats': expected a positive integer");
	load_extra("[trials]\nrepeats = 2.5\n", &cfg,
		   "6: invalid value '2.5' for 'repeats': expected a positive integer");
	/* No unit suffix on plain integers. */
	load_extra("[trials]\nrepeats = 2s\n", &cfg,
		   "6: invalid value '2s' for 'repeats': expected a positive integer");
	/* 2^32 + 2 would wrap to 2 in an unsigned: it must be refused, not truncated. */
	load_extra("[trials]\nrepeats = 4294967298\n", &cfg,
		   "6: invalid value '4294967298' for 'repeats': expected an integer from 1 to 100");
	load_extra(
	    "[trials]\nper_commit = 99999999999999999999999999\n", &cfg,
	    "6: invalid value '99999999999999999999999999' for 'per_commit': expected an integer from 1 to "
	    "100000");
	/* 2^64 + 5: digits that wrapped would read as 5. */
	load_extra(
	    "[trials]\nrepeats = 18446744073709551621\n", &cfg,
	    "6: invalid value '18446744073709551621' for 'repeats': expected an integer from 1 to 100");
	load_extra("[trials]\nper_commit = 100001\n", &cfg,
		   "6: invalid value '100001' for 'per_commit': expected an integer from 1 to 100000");
	load_extra("[http]\nport = 0\n", &cfg,
		   "6: invalid value '0' for 'port': expected a positive integer");
	load_extra("[http]\nport = 65536\n", &cfg,
		   "6: invalid value '65536' for 'port': expected an integer from 1 to 65535");
	load_extra("[build]\nlog_max = 262145\n", &cfg,
		   "6: invalid value '262145' for 'log_max': expected an integer from 1 to 262144");
	load_extra("[repository]\nhistory_max =\n", &cfg,
		   "6: invalid value '' for 'history_max': expected a positive integer");
}

/* [slots] gpus, and the slots' GPU indexes against the GPUs a host has (gpus.c). */
static void test_gpus(void **state)
{
	char dir[] = "/tmp/nw-gpus.XXXXXX", path[64], err[512];
	struct config cfg;

	load_extra("[slots]\nslots = host\n", &cfg, NULL);
	assert_int_equal(cfg.slots_gpus, -1);
	/* Host slots need no GPU, whatever the host has. */
	assert_int_equal(gpus_check_slots(&cfg, "/nonexistent", err, sizeof(err)), 0);
	config_release(&cfg);
	load_extra("[slots]\nslots = 0*2, 1\ngpus = 2\n", &cfg, NULL);
	assert_int_equal(cfg.slots_gpus, 2);
	assert_int_equal(gpus_check_slots(&cfg, "/nonexistent", err, sizeof(err)), 0);
	cfg.slots_gpus = 1;
	assert_int_equal(gpus_check_slots(&cfg, "/nonexistent", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "slot 'gpu1' names GPU 1, which does not exist: this host has 1 GPU "
				 "([slots] gpus), numbered from 0 as CUDA_VISIBLE_DEVICES counts them");
	config_release(&cfg);
	load_extra("[slots]\ngpus = many\n", &cfg,
		   "6: invalid value 'many' for 'gpus': expected 'auto' or a GPU count from 0 to 1024");
	load_extra("[slots]\ngpus = 1025\n", &cfg,
		   "6: invalid value '1025' for 'gpus': expected 'auto' or a GPU count from 0 to 1024");

	/* 'auto': the driver's directory, one entry per GPU. */
	assert_non_null(mkdtemp(dir));
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/0000:%02d:00.0", dir, i);
		assert_int_equal(mkdir(path, 0700), 0);
	}
	load_extra("[slots]\nslots = 1*4, 0\n", &cfg, NULL);
	assert_int_equal(gpus_check_slots(&cfg, dir, err, sizeof(err)), 0);
	config_release(&cfg);
	load_extra("[slots]\nslots = 0, 3*2, host\n", &cfg, NULL);
	assert_int_equal(gpus_check_slots(&cfg, dir, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "slot 'gpu3' names GPU 3, which does not exist: this host has 2 GPUs ("));
	assert_int_equal(gpus_check_slots(&cfg, "/nonexistent/gpus", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "slot 'gpu3' needs GPU 3, but this host shows no NVIDIA GPU "
				 "('/nonexistent/gpus': No such file or directory); if its GPUs are there "
				 "but not listed, say how many with [slots] gpus = N");
	config_release(&cfg);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/0000:%02d:00.0", dir, i);
		rmdir(path);
	}
	rmdir(dir);
}

static void test_slots(void **state)
{
	struct config cfg;
	char list[512], text[1024], want[1024];
	size_t n;
	int i;

	load_extra("[slots]\nslots = 0, 1, host\n", &cfg, NULL);
	assert_int_equal(cfg.nslots, 3);
	assert_string_equal(cfg.slots[0].name, "gpu0");
	assert_int_equal(cfg.slots[0].gpu, 0);
	assert_string_equal(cfg.slots[1].name, "gpu1");
	assert_int_equal(cfg.slots[1].gpu, 1);
	assert_string_equal(cfg.slots[2].name, "host");
	assert_int_equal(cfg.slots[2].gpu, -1);
	config_release(&cfg);

	load_extra("[slots]\nslots=host,host ,  7,host\n", &cfg, NULL);
	assert_int_equal(cfg.nslots, 4);
	assert_string_equal(cfg.slots[0].name, "host");
	assert_string_equal(cfg.slots[1].name, "host1");
	assert_string_equal(cfg.slots[2].name, "gpu7");
	assert_int_equal(cfg.slots[2].gpu, 7);
	assert_string_equal(cfg.slots[3].name, "host2");
	assert_int_equal(cfg.slots[3].gpu, -1);
	config_release(&cfg);

	/* Exactly NW_CONFIG_SLOTS_MAX is fine, one more is not. */
	n = 0;
	for (i = 0; i < NW_CONFIG_SLOTS_MAX; i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", i ? "," : "", i);
	snprintf(text, sizeof(text), "[slots]\nslots = %s\n", list);
	load_extra(text, &cfg, NULL);
	assert_int_equal(cfg.nslots, NW_CONFIG_SLOTS_MAX);
	assert_string_equal(cfg.slots[NW_CONFIG_SLOTS_MAX - 1].name, "gpu63");
	assert_int_equal(cfg.slots[NW_CONFIG_SLOTS_MAX - 1].gpu, 63);
	config_release(&cfg);
	snprintf(text, sizeof(text), "[slots]\nslots = %s,host\n", list);
	snprintf(want, sizeof(want), "6: invalid value '%s,host' for 'slots': more than %d slots", list,
		 NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, want);

	load_extra("[slots]\nslots = 0, 1, 0\n", &cfg,
		   "6: invalid value '0, 1, 0' for 'slots': GPU 0 is listed twice (for several slots on one "
		   "GPU write '0*K', e.g. '0*2')");
	load_extra("[slots]\nslots = 00, 0\n", &cfg,
		   "6: invalid value '00, 0' for 'slots': GPU 0 is listed twice (for several slots on one "
		   "GPU write '0*K', e.g. '0*2')");
	load_extra("[slots]\nslots = 0,,1\n", &cfg,
		   "6: invalid value '0,,1' for 'slots': expected a comma-separated list of GPU indices and "
		   "'host', each optionally followed by '*K'");
	load_extra("[slots]\nslots = 0, 1,\n", &cfg,
		   "6: invalid value '0, 1,' for 'slots': expected a comma-separated list of GPU indices and "
		   "'host', each optionally followed by '*K'");
	load_extra("[slots]\nslots =\n", &cfg,
		   "6: invalid value '' for 'slots': expected a comma-separated list of GPU indices and "
		   "'host', each optionally followed by '*K'");
	load_extra("[slots]\nslots = gpu0\n", &cfg,
		   "6: invalid value 'gpu0' for 'slots': 'gpu0' is neither a GPU index nor 'host'");
	load_extra("[slots]\nslots = 0 1\n", &cfg,
		   "6: invalid value '0 1' for 'slots': '0 1' is neither a GPU index nor 'host'");
	load_extra("[slots]\nslots = -1\n", &cfg,
		   "6: invalid value '-1' for 'slots': '-1' is neither a GPU index nor 'host'");
	load_extra("[slots]\nslots = 1024\n", &cfg,
		   "6: invalid value '1024' for 'slots': GPU index 1024 is out of range (at most 1023)");
}

/* "N*K" and "host*K": K slots on one GPU (gpuN, gpuN.1, ...) or K host slots. */
static void test_slots_shared(void **state)
{
	struct config cfg;
	char list[512], text[1024], want[1024];
	int i;

	load_extra("[slots]\nslots = 0*4, 1*4, host*2\n", &cfg, NULL);
	assert_int_equal(cfg.nslots, 10);
	assert_string_equal(cfg.slots[0].name, "gpu0");
	assert_string_equal(cfg.slots[1].name, "gpu0.1");
	assert_string_equal(cfg.slots[2].name, "gpu0.2");
	assert_string_equal(cfg.slots[3].name, "gpu0.3");
	for (i = 0; i < 4; i++) {
		assert_int_equal(cfg.slots[i].gpu, 0);
		assert_int_equal(cfg.slots[i].peer, (unsigned)i);
		assert_int_equal(cfg.slots[4 + i].gpu, 1);
		assert_int_equal(cfg.slots[4 + i].peer, (unsigned)i);
	}
	assert_string_equal(cfg.slots[4].name, "gpu1");
	assert_string_equal(cfg.slots[7].name, "gpu1.3");
	assert_string_equal(cfg.slots[8].name, "host");
	assert_int_equal(cfg.slots[8].gpu, -1);
	assert_int_equal(cfg.slots[8].peer, 0);
	assert_string_equal(cfg.slots[9].name, "host1");
	assert_int_equal(cfg.slots[9].gpu, -1);
	config_release(&cfg);

	/* *1 is one slot; blanks around '*' are fine; host numbering runs across entries. */
	load_extra("[slots]\nslots = host, 3 * 2, host *2, 2*1\n", &cfg, NULL);
	assert_int_equal(cfg.nslots, 6);
	assert_string_equal(cfg.slots[0].name, "host");
	assert_string_equal(cfg.slots[1].name, "gpu3");
	assert_string_equal(cfg.slots[2].name, "gpu3.1");
	assert_int_equal(cfg.slots[2].gpu, 3);
	assert_string_equal(cfg.slots[3].name, "host1");
	assert_string_equal(cfg.slots[4].name, "host2");
	assert_string_equal(cfg.slots[5].name, "gpu2");
	assert_int_equal(cfg.slots[5].gpu, 2);
	assert_int_equal(cfg.slots[5].peer, 0);
	config_release(&cfg);

	/* The longest names fit: the highest GPU index with every slot on it. */
	snprintf(text, sizeof(text), "[slots]\nslots = 1023*%d\n", NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, NULL);
	assert_int_equal(cfg.nslots, NW_CONFIG_SLOTS_MAX);
	assert_string_equal(cfg.slots[0].name, "gpu1023");
	snprintf(want, sizeof(want), "gpu1023.%d", NW_CONFIG_SLOTS_MAX - 1);
	assert_string_equal(cfg.slots[NW_CONFIG_SLOTS_MAX - 1].name, want);
	assert_int_equal(cfg.slots[NW_CONFIG_SLOTS_MAX - 1].gpu, 1023);
	config_release(&cfg);
	snprintf(text, sizeof(text), "[slots]\nslots = host*%d\n", NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, NULL);
	snprintf(want, sizeof(want), "host%d", NW_CONFIG_SLOTS_MAX - 1);
	assert_string_equal(cfg.slots[NW_CONFIG_SLOTS_MAX - 1].name, want);
	config_release(&cfg);

	/* The total counts every slot of every entry. */
	snprintf(text, sizeof(text), "[slots]\nslots = 0*%d, 1*%d\n", NW_CONFIG_SLOTS_MAX / 2,
		 NW_CONFIG_SLOTS_MAX / 2 + 1);
	snprintf(list, sizeof(list), "0*%d, 1*%d", NW_CONFIG_SLOTS_MAX / 2, NW_CONFIG_SLOTS_MAX / 2 + 1);
	snprintf(want, sizeof(want), "6: invalid value '%s' for 'slots': more than %d slots", list,
		 NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, want);
	snprintf(text, sizeof(text), "[slots]\nslots = 0, host*%d\n", NW_CONFIG_SLOTS_MAX);
	snprintf(want, sizeof(want), "6: invalid value '0, host*%d' for 'slots': more than %d slots",
		 NW_CONFIG_SLOTS_MAX, NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, want);
	snprintf(text, sizeof(text), "[slots]\nslots = 0*%d\n", NW_CONFIG_SLOTS_MAX + 1);
	snprintf(want, sizeof(want),
		 "6: invalid value '0*%d' for 'slots': the slot count in '0*%d' is too large (at most %d "
		 "slots in all)",
		 NW_CONFIG_SLOTS_MAX + 1, NW_CONFIG_SLOTS_MAX + 1, NW_CONFIG_SLOTS_MAX);
	load_extra(text, &cfg, want);
	snprintf(want, sizeof(want),
		 "6: invalid value 'host*99999999999999999999999' for 'slots': the slot count in "
		 "'host*99999999999999999999999' is too large (at most %d slots in all)",
		 NW_CONFIG_SLOTS_MAX);
	load_extra("[slots]\nslots = host*99999999999999999999999\n", &cfg, want);

	/* A GPU in two entries is refused, with the *K form that was probably meant. */
	load_extra("[slots]\nslots = 0*2, 1, 0*2\n", &cfg,
		   "6: invalid value '0*2, 1, 0*2' for 'slots': GPU 0 is listed twice (for several slots "
		   "on one GPU write '0*K', e.g. '0*4')");
	load_extra("[slots]\nslots = 1, 1*3\n", &cfg,
		   "6: invalid value '1, 1*3' for 'slots': GPU 1 is listed twice (for several slots on one "
		   "GPU write '1*K', e.g. '1*4')");

	/* Zero, a missing count, garbage. */
	load_extra("[slots]\nslots = 0*0\n", &cfg,
		   "6: invalid value '0*0' for 'slots': the slot count in '0*0' must be at least 1");
	load_extra("[slots]\nslots = host*0, 0\n", &cfg,
		   "6: invalid value 'host*0, 0' for 'slots': the slot count in 'host*0' must be at least 1");
	load_extra("[slots]\nslots = 0*\n", &cfg,
		   "6: invalid value '0*' for 'slots': '0*' has no slot count after '*'");
	load_extra("[slots]\nslots = 0, host* \n", &cfg,
		   "6: invalid value '0, host*' for 'slots': 'host*' has no slot count after '*'");
	load_extra("[slots]\nslots = *4\n", &cfg,
		   "6: invalid value '*4' for 'slots': '*4' has no GPU index or 'host' before '*'");
	load_extra("[slots]\nslots = 0*x\n", &cfg,
		   "6: invalid value '0*x' for 'slots': the slot count in '0*x' is not a positive integer");
	load_extra("[slots]\nslots = 0*-1\n", &cfg,
		   "6: invalid value '0*-1' for 'slots': the slot count in '0*-1' is not a positive integer");
	load_extra("[slots]\nslots = 0*2*2\n", &cfg,
		   "6: invalid value '0*2*2' for 'slots': the slot count in '0*2*2' is not a positive "
		   "integer");
	load_extra("[slots]\nslots = 0*4s\n", &cfg,
		   "6: invalid value '0*4s' for 'slots': the slot count in '0*4s' is not a positive integer");
	load_extra("[slots]\nslots = 0*2 2\n", &cfg,
		   "6: invalid value '0*2 2' for 'slots': the slot count in '0*2 2' is not a positive "
		   "integer");
	load_extra("[slots]\nslots = gpu0*2\n", &cfg,
		   "6: invalid value 'gpu0*2' for 'slots': 'gpu0' is neither a GPU index nor 'host'");
	load_extra("[slots]\nslots = 1024*2\n", &cfg,
		   "6: invalid value '1024*2' for 'slots': GPU index 1024 is out of range (at most 1023)");
	load_extra("[slots]\nslots = 0x2\n", &cfg,
		   "6: invalid value '0x2' for 'slots': '0x2' is neither a GPU index nor 'host'");
}

static void test_unknown_key(void **state)
{
	struct config cfg;

	/* The message of the brief, line for line. */
	load_text("[repository]\n"
		  "url = /srv/git/lib\n"
		  "\n"
		  "[build]\n"
		  "command = make\n"
		  "; a comment\n"
		  "timout = 60\n",
		  &cfg, "7: unknown key 'timout' in section [build]");
	/* A key of another section is unknown here. */
	load_extra("[http]\nurl = x\n", &cfg, "6: unknown key 'url' in section [http]");
	/* Keys are case-sensitive. */
	load_extra("[http]\nPort = 80\n", &cfg, "6: unknown key 'Port' in section [http]");
	load_text("url = /srv/git/lib\n", &cfg, "1: key 'url' outside of any section");
}

static void test_unknown_section(void **state)
{
	struct config cfg;

	load_text("[repository]\n"
		  "url = /srv/git/lib\n"
		  "[build]\n"
		  "command = make\n"
		  "\n\n\n\n\n\n\n"
		  "[slot]\n"
		  "slots = 0\n",
		  &cfg, "12: unknown section [slot]");
	/* Reported on its own line even when it holds no key. */
	load_extra("[Build]\n", &cfg, "5: unknown section [Build]");
	load_extra("  [ http ]\n", &cfg, "5: unknown section [ http ]");
	load_extra("[http] port = 80\n", &cfg, "5: unexpected text 'port = 80' after section header [http]");
}

static void test_missing_required(void **state)
{
	struct config cfg;

	load_text("[build]\ncommand = make\n", &cfg, "0: missing required option 'url' in [repository]");
	load_text("[repository]\nurl = /srv/git/lib\n", &cfg,
		  "0: missing required option 'command' in [build]");
	load_text("", &cfg, "0: missing required option 'url' in [repository]");
	load_text("[repository]\nurl =\n[build]\ncommand = make\n", &cfg,
		  "2: invalid value '' for 'url': expected a non-empty value");
}

static void test_duplicate_key(void **state)
{
	struct config cfg;

	load_text("[repository]\n"
		  "url = /srv/git/a\n"
		  "[build]\n"
		  "command = make\n"
		  "[repository]\n"
		  "url = /srv/git/b\n",
		  &cfg, "6: duplicate key 'url' in section [repository] (first set on line 2)");
	/* A section may be opened twice as long as its keys are not repeated. */
	load_text("[repository]\nurl = /srv/git/a\n[build]\ncommand = make\n[repository]\nbranch = dev\n",
		  &cfg, NULL);
	assert_string_equal(cfg.repo_branch, "dev");
	config_release(&cfg);
}

static void test_cannot_open(void **state)
{
	struct config cfg;
	char err[256], dir[] = "/tmp/nw_test_config_dir_XXXXXX", want[300];
	int r;

	memset(&cfg, 0xff, sizeof(cfg)); /* config_load() must not read what was there */
	r = config_load(&cfg, "/tmp/nw-no-such-dir/numwatch.conf", err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_string_equal(err,
			    "cannot open '/tmp/nw-no-such-dir/numwatch.conf': No such file or directory");
	assert_null(cfg.repo_url);
	assert_int_equal(cfg.nslots, 0);
	config_release(&cfg);

	/* A directory is refused before it is read. */
	assert_non_null(mkdtemp(dir));
	r = config_load(&cfg, dir, err, sizeof(err));
	rmdir(dir);
	assert_int_equal(r, -EISDIR);
	snprintf(want, sizeof(want), "cannot open '%s': Is a directory", dir);
	assert_string_equal(err, want);
	assert_null(cfg.repo_url);
}

/* Regular files only: a FIFO without a writer would block the load for ever, a device never end. */
static void test_not_regular(void **state)
{
	char dir[] = "/tmp/nw_test_config_fifo_XXXXXX", fifo[64], want[300], err[256];
	struct config cfg;

	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/numwatch.conf", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(config_load(&cfg, fifo, err, sizeof(err)), -EINVAL);
	unlink(fifo);
	rmdir(dir);
	snprintf(want, sizeof(want), "cannot open '%s': a FIFO, not a regular file", fifo);
	assert_string_equal(err, want);
	assert_int_equal(config_load(&cfg, "/dev/zero", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "cannot open '/dev/zero': a device, not a regular file");
}

static void test_unreadable_file(void **state)
{
	struct config cfg;
	struct conf_file f;
	char err[256], want[300];
	int r;

	if (geteuid() == 0)
		skip(); /* root reads any file */
	conf_write(&f, MINIMAL);
	assert_int_equal(chmod(f.path, 0), 0);
	r = config_load(&cfg, f.path, err, sizeof(err));
	unlink(f.path);
	assert_int_equal(r, -EACCES);
	snprintf(want, sizeof(want), "cannot open '%s': Permission denied", f.path);
	assert_string_equal(err, want);
}

static void test_long_line(void **state)
{
	struct config cfg;
	size_t prefix = strlen("command = ");
	char *text, *line;
	size_t n;

	text = malloc(3 * NW_CONFIG_LINE_MAX);
	assert_non_null(text);
	/* A line of exactly NW_CONFIG_LINE_MAX bytes is accepted whole... */
	n = (size_t)sprintf(text, "[repository]\nurl = /srv/git/lib\n[build]\ncommand = ");
	line = text + n - prefix;
	memset(text + n, 'x', NW_CONFIG_LINE_MAX - prefix);
	n += NW_CONFIG_LINE_MAX - prefix;
	assert_int_equal(text + n - line, NW_CONFIG_LINE_MAX);
	strcpy(text + n, "\r\n[trials]\nrepeats = 3\n");
	load_text(text, &cfg, NULL);
	assert_int_equal(strlen(cfg.build_command), NW_CONFIG_LINE_MAX - prefix);
	assert_int_equal(cfg.repeats, 3);
	config_release(&cfg);

	/* ... one byte more is refused, not split into two lines. */
	n = (size_t)sprintf(text, "[repository]\nurl = /srv/git/lib\n[build]\ncommand = ");
	memset(text + n, 'x', NW_CONFIG_LINE_MAX - prefix + 1);
	n += NW_CONFIG_LINE_MAX - prefix + 1;
	strcpy(text + n, "\n[trials]\nrepeats = 3\n");
	load_text(text, &cfg, "4: line too long (more than 4096 bytes)");

	/* Also without a final newline, far past the limit. */
	n = (size_t)sprintf(text, "[repository]\nurl = /srv/git/lib\n[build]\n\ncommand = ");
	memset(text + n, 'y', 2 * NW_CONFIG_LINE_MAX);
	text[n + 2 * NW_CONFIG_LINE_MAX] = '\0';
	load_text(text, &cfg, "5: line too long (more than 4096 bytes)");
	free(text);
}

static void test_syntax_errors(void **state)
{
	struct config cfg;
	static const char nul[] = "[repository]\nurl = /srv/git/lib\n[build]\ncommand = ma\0ke\n";

	load_extra("[trials]\nthis line has no equals sign\n", &cfg,
		   "6: syntax error: expected 'key = value', '[section]' or a comment");
	load_extra("[trials\nrepeats = 3\n", &cfg, "5: syntax error: missing ']' in section header");
	load_text_len(nul, sizeof(nul) - 1, &cfg, "4: line contains a NUL byte");
	/* Errors stop at the first one: a later bad line does not change the message. */
	load_extra("[trials]\nrepeats = 0\nbogus\n[nope]\n", &cfg,
		   "6: invalid value '0' for 'repeats': expected a positive integer");
}

static void test_comments_and_whitespace(void **state)
{
	struct config cfg;

	load_text("\xEF\xBB\xBF; numwatch test configuration\r\n"
		  "# hash comments too\r\n"
		  "   ; indented comment\r\n"
		  "\r\n"
		  "  [repository]   \r\n"
		  "\turl\t=\t/srv/git/lib  \r\n"
		  "    branch=dev\r\n"
		  "poll_interval : 5m\r\n"
		  "[build]\r\n"
		  "command = make -j8 all ; make check # both\r\n"
		  "[daemon]\r\n"
		  "database = password=a;b#c dbname=nw\r\n",
		  &cfg, NULL);
	assert_string_equal(cfg.repo_url, "/srv/git/lib");
	/* An indented key is a key, not the continuation of the previous value. */
	assert_string_equal(cfg.repo_branch, "dev");
	assert_int_equal(cfg.poll_interval_s, 300);
	/* No end-of-line comments: ';' and '#' belong to the value. */
	assert_string_equal(cfg.build_command, "make -j8 all ; make check # both");
	assert_string_equal(cfg.database, "password=a;b#c dbname=nw");
	config_release(&cfg);

	/* An empty conninfo means libpq's defaults (PGHOST, PGDATABASE, ...). */
	load_extra("[daemon]\ndatabase =\n", &cfg, NULL);
	assert_string_equal(cfg.database, "");
	config_release(&cfg);
}

static void test_string_values(void **state)
{
	struct config cfg;

	load_extra("[daemon]\nstate_dir = var/numwatch\n", &cfg,
		   "6: invalid value 'var/numwatch' for 'state_dir': expected an absolute path");
	load_extra("[http]\nweb_root = web\n", &cfg,
		   "6: invalid value 'web' for 'web_root': expected an absolute path");
	load_text("[repository]\nurl = --upload-pack=touch /tmp/pwned\n[build]\ncommand = make\n", &cfg,
		  "2: invalid value '--upload-pack=touch /tmp/pwned' for 'url': must not start with '-'");
	load_extra("[repository]\nbranch = -x\n", &cfg,
		   "6: invalid value '-x' for 'branch': must not start with '-'");
	load_extra("[http]\naddress = localhost\n", &cfg,
		   "6: invalid value 'localhost' for 'address': expected an IPv4 address");
	/* The HTTP server binds IPv4 only: an IPv6 address is refused here, with its line. */
	load_extra("[http]\naddress = ::1\n", &cfg,
		   "6: invalid value '::1' for 'address': expected an IPv4 address");
	load_extra(
	    "[http]\npublic_url = numwatch.example.org\n", &cfg,
	    "6: invalid value 'numwatch.example.org' for 'public_url': expected a url starting with http:// "
	    "or https://");
	load_extra(
	    "[build]\nrunner_cuda = /usr/bin/runner\n", &cfg,
	    "6: invalid value '/usr/bin/runner' for 'runner_cuda': expected a path relative to the build "
	    "directory");
	load_extra("[daemon]\nnode_name =\n", &cfg,
		   "6: invalid value '' for 'node_name': expected a non-empty value");
	load_extra("[build]\ncommand = make\n", &cfg,
		   "6: duplicate key 'command' in section [build] (first set on line 4)");
}

/* [build] env, [slots] env and [build] identity: what the build and the runners see, and what they are. */
static void test_env_and_identity(void **state)
{
	struct config cfg;

	(void)state;
	setenv("NW_TEST_HOME", "/opt/x", 1);
	unsetenv("NW_TEST_UNSET");
	load_extra("[build]\nenv = PYTHONPATH=/opt/nw/python  TRITON_CACHE_DIR VENV=\"a b\" "
		   "PATH=${NW_TEST_HOME}/bin:/usr/bin E= U=x${NW_TEST_UNSET}y D=$HOME\n"
		   "identity = src/**, setup.py csrc/*.cu\n"
		   "[slots]\nslots = host\nenv = CMAKE_PREFIX_PATH\n",
		   &cfg, NULL);
	assert_int_equal(cfg.build_env.n, 7);
	assert_string_equal(cfg.build_env.vars[0].name, "PYTHONPATH");
	assert_string_equal(cfg.build_env.vars[0].value, "/opt/nw/python");
	assert_string_equal(cfg.build_env.vars[1].name, "TRITON_CACHE_DIR");
	assert_null(cfg.build_env.vars[1].value); /* passed through */
	assert_string_equal(cfg.build_env.vars[2].value, "a b");
	assert_string_equal(cfg.build_env.vars[3].value, "/opt/x/bin:/usr/bin");
	assert_string_equal(cfg.build_env.vars[4].value, "");
	assert_string_equal(cfg.build_env.vars[5].value, "xy");
	/* Only ${NAME} is expanded. */
	assert_string_equal(cfg.build_env.vars[6].value, "$HOME");
	assert_string_equal(cfg.build_identity, "src/**, setup.py csrc/*.cu");
	assert_int_equal(cfg.slots_env.n, 1);
	assert_string_equal(cfg.slots_env.vars[0].name, "CMAKE_PREFIX_PATH");
	assert_null(cfg.slots_env.vars[0].value);
	config_release(&cfg);

	/* Defaults: nothing added, no globs. */
	load_extra("", &cfg, NULL);
	assert_int_equal(cfg.build_env.n, 0);
	assert_int_equal(cfg.slots_env.n, 0);
	assert_string_equal(cfg.build_identity, "");
	config_release(&cfg);

	load_extra(
	    "[build]\nenv = 1X=2\n", &cfg,
	    "6: invalid value '1X=2' for 'env': expected NAME=VALUE or NAME entries (NAME: letters, digits "
	    "and '_', not starting with a digit)");
	load_extra("[build]\nenv = A-B=1\n", &cfg,
		   "6: invalid value 'A-B=1' for 'env': expected NAME=VALUE or NAME entries (NAME: letters, "
		   "digits and '_', not starting with a digit)");
	load_extra("[build]\nenv = A=1 A=2\n", &cfg,
		   "6: invalid value 'A=1 A=2' for 'env': A is listed twice");
	load_extra("[build]\nenv = A=\"x\n", &cfg,
		   "6: invalid value 'A=\"x' for 'env': a '\"' is not closed");
	load_extra("[build]\nenv = A=\"x\"y\n", &cfg,
		   "6: invalid value 'A=\"x\"y' for 'env': expected a blank after the closing '\"'");
	load_extra("[build]\nenv = A=${B\n", &cfg,
		   "6: invalid value 'A=${B' for 'env': '${' must be followed by a variable name and '}'");
	load_extra(
	    "[build]\nenv = NUMWATCH_BUILD_DIR=/x\n", &cfg,
	    "6: invalid value 'NUMWATCH_BUILD_DIR=/x' for 'env': numwatchd sets NUMWATCH_BUILD_DIR itself");
	load_extra("[slots]\nenv = CUDA_VISIBLE_DEVICES=1\n", &cfg,
		   "6: invalid value 'CUDA_VISIBLE_DEVICES=1' for 'env': numwatchd sets CUDA_VISIBLE_DEVICES "
		   "itself");
	load_extra(
	    "[build]\nidentity = /src/**\n", &cfg,
	    "6: invalid value '/src/**' for 'identity': expected globs relative to the repository root "
	    "(src/**, setup.py)");
	load_extra("[build]\nidentity = src, :(exclude)doc\n", &cfg,
		   "6: invalid value 'src, :(exclude)doc' for 'identity': expected globs relative to the "
		   "repository root (src/**, setup.py)");
	{
		char text[1024], names[800], want[1024];
		int n = 0;

		for (int i = 0; i <= NW_CONFIG_ENV_MAX; i++)
			n += snprintf(names + n, sizeof(names) - (size_t)n, "%sV%d", i ? " " : "", i);
		snprintf(text, sizeof(text), "[slots]\nenv = %s\n", names);
		snprintf(want, sizeof(want), "6: invalid value '%s' for 'env': more than %d variables", names,
			 NW_CONFIG_ENV_MAX);
		load_extra(text, &cfg, want);
	}
}

/* An error late in the file, after many strings were set: nothing may leak (run under ASan). */
static void test_error_after_allocations(void **state)
{
	struct config cfg;

	load_text("[daemon]\nstate_dir = /a\ndatabase = dbname=x\nnode_name = n\n"
		  "[repository]\nname = r\nurl = /u\nbranch = b\n"
		  "[build]\ncommand = c\nrunner_host = h\nrunner_cuda = c\n"
		  "[http]\naddress = 127.0.0.2\nweb_root = /w\npublic_url = http://x\n"
		  "[slots]\nslots = 0, bad\n",
		  &cfg, "18: invalid value '0, bad' for 'slots': 'bad' is neither a GPU index nor 'host'");
	/* Releasing a zeroed or already released config is harmless. */
	config_release(&cfg);
	config_release(&cfg);
}

/* A small error buffer truncates the message and nothing else. */
static void test_small_error_buffer(void **state)
{
	struct config cfg;
	char err[8];

	assert_int_equal(config_load(&cfg, "/tmp/nw-no-such-dir/x.conf", err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "cannot ");
	assert_int_equal(config_load(&cfg, "/tmp/nw-no-such-dir/x.conf", NULL, 0), -ENOENT);
}

/* [verdict] and [bisect]: the statistics' and the search's parameters, decimal numbers in ranges. */
static void test_statistics(void **state)
{
	struct config cfg;

	load_text(MINIMAL, &cfg, NULL);
	assert_true(cfg.verdict_p0_floor == 0.002 && cfg.verdict_p1 == 0.02 && cfg.verdict_p1_factor == 3.0);
	assert_true(cfg.verdict_alpha == 0.01 && cfg.verdict_beta == 0.05 && cfg.verdict_min_trials == 20);
	assert_true(cfg.verdict_mcnemar_alpha == 0.01 && cfg.verdict_drift_factor == 2.0 &&
		    cfg.verdict_drift_alpha == 0.001);
	assert_true(cfg.bisect_confidence == 0.99 && cfg.bisect_prior_none == 0.1);
	assert_int_equal(cfg.bisect_max_trials, 50000);
	config_release(&cfg);

	load_extra("[verdict]\np0_floor = 1e-3\np1 = 0.05\np1_factor = 2.5\nalpha = 0.001\nbeta = 0.1\n"
		   "min_trials = 40\nmcnemar_alpha = 0.005\ndrift_factor = 1.5\ndrift_alpha = 0.0001\n"
		   "[bisect]\nconfidence = 0.999\nprior_none = 0\nmax_trials = 20000\n",
		   &cfg, NULL);
	assert_true(cfg.verdict_p0_floor == 0.001 && cfg.verdict_p1 == 0.05 && cfg.verdict_p1_factor == 2.5);
	assert_true(cfg.verdict_alpha == 0.001 && cfg.verdict_beta == 0.1 && cfg.verdict_min_trials == 40);
	assert_true(cfg.verdict_mcnemar_alpha == 0.005 && cfg.verdict_drift_factor == 1.5 &&
		    cfg.verdict_drift_alpha == 0.0001);
	assert_true(cfg.bisect_confidence == 0.999 && cfg.bisect_prior_none == 0.0);
	assert_int_equal(cfg.bisect_max_trials, 20000);
	config_release(&cfg);

	load_extra("[bisect]\nconfidence = 0.5\n", &cfg,
		   "6: invalid value '0.5' for 'confidence': expected a number from 0.51 to 0.999999");
	load_extra("[bisect]\nconfidence = 99%\n", &cfg,
		   "6: invalid value '99%' for 'confidence': expected a number from 0.51 to 0.999999");
	load_extra("[verdict]\nalpha = nan\n", &cfg,
		   "6: invalid value 'nan' for 'alpha': expected a number from 1e-09 to 0.49");
	load_extra("[verdict]\nbeta =\n", &cfg,
		   "6: invalid value '' for 'beta': expected a number from 1e-09 to 0.49");
	load_extra("[verdict]\np1 = 1e400\n", &cfg,
		   "6: invalid value '1e400' for 'p1': expected a number from 1e-06 to 0.99");
	load_extra("[verdict]\nmin_trials = 0\n", &cfg,
		   "6: invalid value '0' for 'min_trials': expected a positive integer");
	/* Each value in range, but the SPRT's two rates the wrong way round. */
	load_extra("[verdict]\np0_floor = 0.01\np1 = 0.005\n", &cfg,
		   "7: [verdict] p1 (0.005) must be above p0_floor (0.01)");
	load_extra("[verdict]\np0_floor = 0.03\n", &cfg,
		   "0: [verdict] p1 (0.02) must be above p0_floor (0.03)");
}

/*
 * The settings daemons sharing a database must agree on: the same for two
 * hosts that differ only in their own paths, slots, port, node name, build
 * command and mail; different, naming the key, when a verdict setting differs.
 */
static void test_shared_settings(void **state)
{
	struct config a, b, c;
	char ta[4096], tb[4096], tc[4096], da[17], db[17], dc[17], diff[256];

	load_text(MINIMAL "[trials]\nper_commit = 32\n", &a, NULL);
	load_text("[daemon]\nstate_dir = /srv/nw\nnode_name = gpu-b\nlease = 20\n"
		  "[repository]\nurl = /srv/mirror/demo-kernels.git\nname = demo-kernels\n"
		  "[build]\ncommand = make -j64\n[trials]\nper_commit = 32\n[slots]\nslots = 0*4, host\n"
		  "[http]\nport = 9090\n[mail]\nto = ops@example.org\n",
		  &b, NULL);
	load_text(MINIMAL "[trials]\nper_commit = 64\n[verdict]\nalpha = 0.005\n", &c, NULL);
	assert_int_equal(config_shared(&a, ta, sizeof(ta)), 0);
	assert_int_equal(config_shared(&b, tb, sizeof(tb)), 0);
	assert_int_equal(config_shared(&c, tc, sizeof(tc)), 0);
	assert_non_null(strstr(ta, "trials.per_commit=32\n"));
	assert_non_null(strstr(ta, "verdict.alpha=0.01"));
	assert_non_null(strstr(ta, "bisect.automatic=true\n"));
	assert_null(strstr(ta, "state_dir"));
	assert_null(strstr(ta, "build.command"));
	assert_string_equal(ta, tb);
	config_digest(ta, da);
	config_digest(tb, db);
	config_digest(tc, dc);
	assert_int_equal(strlen(da), 16);
	assert_string_equal(da, db);
	assert_string_not_equal(da, dc);
	config_shared_diff(ta, tb, diff, sizeof(diff));
	assert_string_equal(diff, "");
	config_shared_diff(ta, tc, diff, sizeof(diff));
	assert_string_equal(diff, "trials.per_commit, verdict.alpha");
	/* A key one side lacks (an older daemon's list) counts as a difference, listed once. */
	config_shared_diff("a.x=1\nb.y=2\n", "a.x=1\nc.z=3\n", diff, sizeof(diff));
	assert_string_equal(diff, "b.y, c.z");
	/* Truncated, never overrun. */
	config_shared_diff(ta, tc, diff, 10);
	assert_true(strlen(diff) < 10);
	assert_int_equal(config_shared(&a, ta, 32), -ENOSPC);
	assert_true(strlen(ta) < 32);
	config_release(&a);
	config_release(&b);
	config_release(&c);
}

/* The example shipped in systemd/ must stay a valid file: users start from it. */
static void test_shipped_example(void **state)
{
#ifdef NW_SOURCE_DIR
	struct config cfg;
	char err[512];

	assert_int_equal(config_load(&cfg, NW_SOURCE_DIR "/systemd/numwatch.conf.example", err, sizeof(err)),
			 0);
	assert_int_equal(cfg.nslots, 2);
	assert_string_equal(cfg.slots[0].name, "gpu0");
	assert_string_equal(cfg.slots[1].name, "gpu1");
	assert_non_null(strstr(cfg.build_command, "\"$NUMWATCH_BUILD_DIR\""));
	config_release(&cfg);
#else
	skip();
#endif
}

/* [store] connections: the default follows the slots; a number within bounds; anything else refused. */
static void test_store_connections(void **state)
{
	static const struct {
		const char *slots;
		unsigned connections;
	} defaults[] = {
	    {"host", 2},
	    {"0*8", 2},
	    {"0*8, 1*8", 2},
	    {"0*8, 1*8, 2", 3},
	    {"0*8, 1*8, 2*8", 3},
	    {"0*8, 1*8, 2*8, 3*8", 4},
	    {"0*16, 1*16, 2*16, 3*16", 8},
	};
	struct config cfg;
	char text[256];

	(void)state;
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		snprintf(text, sizeof(text), "[slots]\nslots = %s\n", defaults[i].slots);
		load_extra(text, &cfg, NULL);
		if (cfg.store_connections != defaults[i].connections)
			print_error("slots '%s': %u store connections, want %u\n", defaults[i].slots,
				    cfg.store_connections, defaults[i].connections);
		assert_int_equal(cfg.store_connections, defaults[i].connections);
		config_release(&cfg);
	}
	assert_int_equal(config_store_connections(0), 2);
	assert_int_equal(config_store_connections(17), 3);
	assert_int_equal(config_store_connections(1000), 8);
	/* The judge's: one per 4 slots, 4 to 16. */
	assert_int_equal(config_judge_connections(1), 4);
	assert_int_equal(config_judge_connections(24), 6);
	assert_int_equal(config_judge_connections(25), 7);
	assert_int_equal(config_judge_connections(1000), 16);
	load_extra("[store]\nconnections = auto\n", &cfg, NULL);
	assert_int_equal(cfg.store_connections, 2);
	config_release(&cfg);
	load_extra("[slots]\nslots = 0*8\n[store]\nconnections = 12\n", &cfg, NULL);
	assert_int_equal(cfg.store_connections, 12);
	config_release(&cfg);
	load_extra("[store]\nconnections = 1\n", &cfg, NULL);
	assert_int_equal(cfg.store_connections, 1);
	config_release(&cfg);
	load_extra("[store]\nconnections = 32\n", &cfg, NULL);
	assert_int_equal(cfg.store_connections, 32);
	config_release(&cfg);
	load_extra("[store]\nconnections = 0\n", &cfg,
		   "6: invalid value '0' for 'connections': expected 'auto' or an integer from 1 to 32");
	load_extra("[store]\nconnections = 33\n", &cfg,
		   "6: invalid value '33' for 'connections': expected 'auto' or an integer from 1 to 32");
	load_extra("[store]\nconnections = many\n", &cfg,
		   "6: invalid value 'many' for 'connections': expected 'auto' or an integer from 1 to 32");
	load_extra("[store]\nconnections = -1\n", &cfg,
		   "6: invalid value '-1' for 'connections': expected 'auto' or an integer from 1 to 32");
	load_extra("[store]\nconnection = 2\n", &cfg, "6: unknown key 'connection' in section [store]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_statistics),
	    cmocka_unit_test(test_every_option),
	    cmocka_unit_test(test_public_url_default),
	    cmocka_unit_test(test_repo_name_from_url),
	    cmocka_unit_test(test_durations),
	    cmocka_unit_test(test_integers),
	    cmocka_unit_test(test_slots),
	    cmocka_unit_test(test_gpus),
	    cmocka_unit_test(test_store_connections),
	    cmocka_unit_test(test_slots_shared),
	    cmocka_unit_test(test_unknown_key),
	    cmocka_unit_test(test_unknown_section),
	    cmocka_unit_test(test_missing_required),
	    cmocka_unit_test(test_duplicate_key),
	    cmocka_unit_test(test_cannot_open),
	    cmocka_unit_test(test_not_regular),
	    cmocka_unit_test(test_unreadable_file),
	    cmocka_unit_test(test_long_line),
	    cmocka_unit_test(test_syntax_errors),
	    cmocka_unit_test(test_comments_and_whitespace),
	    cmocka_unit_test(test_string_values),
	    cmocka_unit_test(test_error_after_allocations),
	    cmocka_unit_test(test_env_and_identity),
	    cmocka_unit_test(test_small_error_buffer),
	    cmocka_unit_test(test_shipped_example),
	    cmocka_unit_test(test_shared_settings),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
