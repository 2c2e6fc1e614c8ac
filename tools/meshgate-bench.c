/* SPDX-License-Identifier: ISC */
/*
 * meshgate-bench: the load generator behind docs/benchmarks.md. It runs streams of GET
 * requests at one meshgate on this machine for a bounded time and prints, per stream, what was
 * sent, what came back and exact latency percentiles (see bench.h, and --help).
 *
 * Exit codes:
 *   0    the report was written
 *   1    the target did not accept a connection at the start (nothing was measured)
 *   2    a stream had more answers it does not expect than --max-unexpected-pct allows (the
 *        report was written, and a line on stderr names the stream and what came back)
 *   64   bad command line, a target other than 127.0.0.1 / ::1, or a run that would need more
 *        open files than the limit allows
 *   71   a system error (threads, epoll, memory, the output)
 *   130  interrupted (SIGINT or SIGTERM): the partial report was still written
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define EXIT_INTERRUPTED 130

static atomic_int stop_requested;

static void on_stop(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

/* Raises the soft open-file limit to the hard one: a run may hold thousands of sockets. */
static rlim_t raise_open_file_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

/* Without --max-outstanding, open streams get the default or what the limit leaves them. */
static void fit_default_outstanding(struct mg_bench_config *cfg, rlim_t limit)
{
    unsigned open_streams = 0;
    for (unsigned i = 0; i < cfg->nstreams; i++)
        open_streams += cfg->streams[i].mode == MG_BENCH_OPEN;
    if (cfg->max_outstanding_given || open_streams == 0 || limit == RLIM_INFINITY)
        return;
    uint64_t needed = mg_bench_descriptors_needed(cfg);
    if (needed <= limit)
        return;
    uint64_t others = needed - (uint64_t)cfg->max_outstanding * open_streams;
    if (others < limit && (limit - others) / open_streams >= 1)
        cfg->max_outstanding = (unsigned)((limit - others) / open_streams);
}

static int write_out(const struct mg_buf *b)
{
    if (b->failed) {
        fprintf(stderr, "meshgate-bench: out of memory while writing the report\n");
        return MG_BENCH_SYSTEM_ERROR;
    }
    if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) {
        fprintf(stderr, "meshgate-bench: cannot write the report: %s\n", strerror(errno));
        return MG_BENCH_SYSTEM_ERROR;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct mg_bench_config cfg;
    static struct mg_bench_report rep;
    char err[1024];
    struct mg_buf out;
    mg_buf_init(&out);
    mg_bench_config_init(&cfg);

    switch (mg_bench_parse_args(&cfg, argc, argv, err, sizeof err)) {
    case MG_BENCH_ARGS_HELP:
        mg_bench_usage(&out);
        write_out(&out);
        mg_buf_free(&out);
        mg_bench_config_free(&cfg);
        return 0;
    case MG_BENCH_ARGS_BAD:
        fprintf(stderr, "meshgate-bench: %s (see meshgate-bench --help)\n", err);
        mg_bench_config_free(&cfg);
        return EXIT_USAGE;
    case MG_BENCH_ARGS_OK:
        break;
    }
    fit_default_outstanding(&cfg, raise_open_file_limit());

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    cfg.stop = &stop_requested;

    if (isatty(STDERR_FILENO))
        fprintf(stderr,
                "meshgate-bench: %u stream%s at %s for %g s (after %g s of warm-up); Ctrl-C "
                "stops early\n",
                cfg.nstreams, cfg.nstreams == 1 ? "" : "s", cfg.target.text, cfg.duration_s,
                cfg.warmup_s);
    enum mg_bench_status status = mg_bench_run(&cfg, &rep, err, sizeof err);
    if (status != MG_BENCH_OK) {
        fprintf(stderr, "meshgate-bench: %s\n", err);
        mg_bench_report_free(&rep);
        mg_bench_config_free(&cfg);
        return (int)status;
    }
    if (cfg.json) {
        mg_bench_render_json(&cfg, &rep, &out);
        mg_buf_putc(&out, '\n');
    } else {
        mg_bench_render_text(&cfg, &rep, &out);
    }
    int rc = write_out(&out);
    if (rc == 0 && rep.interrupted)
        rc = EXIT_INTERRUPTED;
    if (rc == 0 && !mg_bench_check_unexpected(&cfg, &rep, err, sizeof err)) {
        fprintf(stderr, "meshgate-bench: FAILED: %s\n", err);
        rc = MG_BENCH_UNEXPECTED;
    }
    mg_buf_free(&out);
    mg_bench_report_free(&rep);
    mg_bench_config_free(&cfg);
    return rc;
}
