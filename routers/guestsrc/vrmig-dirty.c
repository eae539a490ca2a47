/* vrmig-dirty: dirty guest memory at a set rate, for live-migration measurements.
 *
 *     vrmig-dirty [--wss-mib N] [--seconds S] RATE
 *
 * RATE is in MB/s as QEMU's calc-dirty-rate reports a dirty rate: MB = 2^20 bytes, i.e. RATE x 256
 * distinct 4 KiB pages dirtied per second.  The load is the one of QEMU's guestperf workload
 * (tests/migration/stress.c) with a rate set: one write per page, walking a buffer page by page,
 * paced against CLOCK_MONOTONIC every TICK_NS (the pages due since the start are written, then it
 * sleeps to the next tick).  The buffer (the working set) holds WSS_SECONDS of writes at RATE, so
 * any window shorter than that sees RATE x window distinct pages dirtied; a page is written again
 * only after the walk wraps, with a value that differs from its previous one (so that a sampling
 * measurement which hashes page contents sees the change too).  The working set is capped to half
 * of the memory the guest has available (MemAvailable); the marker line says what it got.
 *
 * Prints one line when the pacing starts (after every page of the buffer was touched once):
 *     VRMIG-DIRTY rate_mb_s=<RATE> wss_mib=<N> wss_s=<seconds of writes it holds> pid=<pid>
 * and, once, "VRMIG-DIRTY-LAG ..." when it fell more than MAX_DEBT_S behind (the CPU cannot
 * sustain the rate; the debt beyond MAX_DEBT_S is dropped rather than written in a burst).
 * Errors: "VRMIG-DIRTY-FAIL <reason>" and exit 1 (2 for bad arguments).
 * With --seconds S it stops after S seconds and prints "pages=<written> seconds=<elapsed>
 * rate_mb_s=<achieved> skipped=<dropped pages>" (the self-test on the build host); without it, it
 * runs until killed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE_BYTES 4096u
#define PAGES_PER_MB 256u              /* 2^20 / 4096 */
#define MAX_RATE_MB_S 100000.0         /* far above what a guest vCPU can write page by page */
#define TICK_NS 5000000LL              /* 5 ms pacing tick */
#define WSS_SECONDS 4.0                /* working set = 4 s of writes at RATE */
#define MAX_DEBT_S 0.1                 /* behind by more than 100 ms of writes: drop the excess */
#define NS_PER_S 1000000000LL

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static void sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = t_ns / NS_PER_S, .tv_nsec = t_ns % NS_PER_S};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* MemAvailable of /proc/meminfo in MiB, or -1 */
static long mem_available_mib(void)
{
    FILE *fh = fopen("/proc/meminfo", "r");
    char line[256];
    long kib = -1;
    if (fh == NULL)
        return -1;
    while (fgets(line, sizeof line, fh) != NULL) {
        if (sscanf(line, "MemAvailable: %ld kB", &kib) == 1)
            break;
    }
    fclose(fh);
    return kib < 0 ? -1 : kib / 1024;
}

static int parse_positive(const char *text, double max, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v > 0.0) || v > max)
        return -1;
    *out = v;
    return 0;
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--wss-mib N] [--seconds S] RATE_MB_S (MB = 2^20 B)\n", argv0);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"wss-mib", required_argument, NULL, 'w'},
        {"seconds", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    double rate = 0.0, wss_arg = 0.0, seconds = 0.0;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if (parse_positive(optarg, 1 << 20, &wss_arg) != 0) {
                printf("VRMIG-DIRTY-FAIL bad --wss-mib '%s' (a number of MiB above 0)\n", optarg);
                return 2;
            }
            break;
        case 's':
            if (parse_positive(optarg, 1e6, &seconds) != 0) {
                printf("VRMIG-DIRTY-FAIL bad --seconds '%s' (a number above 0)\n", optarg);
                return 2;
            }
            break;
        default:
            usage(argv[0]);
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(argv[0]);
        return 2;
    }
    if (parse_positive(argv[optind], MAX_RATE_MB_S, &rate) != 0) {
        printf("VRMIG-DIRTY-FAIL bad rate '%s' (MB/s above 0, at most %.0f)\n", argv[optind], MAX_RATE_MB_S);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    double wss_mib = wss_arg > 0.0 ? wss_arg : rate * WSS_SECONDS;
    long avail = mem_available_mib();
    if (wss_arg <= 0.0 && avail > 0 && wss_mib > (double)avail / 2.0)
        wss_mib = (double)avail / 2.0;
    size_t npages = (size_t)(wss_mib * PAGES_PER_MB);
    if (npages < 1)
        npages = 1;
    size_t bytes = npages * PAGE_BYTES;
    unsigned char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        printf("VRMIG-DIRTY-FAIL cannot map %zu MiB: %s\n", bytes >> 20, strerror(errno));
        return 1;
    }
    /* every page backed and non-zero before the pacing starts */
    for (size_t i = 0; i < npages; i++)
        *(volatile uint64_t *)(buf + i * PAGE_BYTES) = 1;

    double pages_per_ns = rate * PAGES_PER_MB / (double)NS_PER_S;
    uint64_t max_debt = (uint64_t)(rate * PAGES_PER_MB * MAX_DEBT_S) + 1;
    printf("VRMIG-DIRTY rate_mb_s=%g wss_mib=%.1f wss_s=%.2f pid=%d\n", rate, (double)bytes / (1 << 20),
           (double)npages / (rate * PAGES_PER_MB), (int)getpid());

    uint64_t written = 0, skipped = 0, pass = 2;
    size_t idx = 0;
    int lag_reported = 0;
    int64_t t0 = now_ns(), next = t0;
    int64_t end = seconds > 0.0 ? t0 + (int64_t)(seconds * NS_PER_S) : INT64_MAX;
    for (;;) {
        int64_t t = now_ns();
        if (t > end)
            t = end;
        uint64_t due = (uint64_t)((double)(t - t0) * pages_per_ns) - skipped;
        if (due > written + max_debt) {
            uint64_t drop = due - written - max_debt;
            skipped += drop;
            due -= drop;
            if (!lag_reported) {
                printf("VRMIG-DIRTY-LAG behind by more than %.0f ms of writes at %g MB/s: the rate is not "
                       "sustained (excess dropped)\n", MAX_DEBT_S * 1e3, rate);
                lag_reported = 1;
            }
        }
        while (written < due) {
            *(volatile uint64_t *)(buf + idx * PAGE_BYTES) = pass;
            written++;
            if (++idx == npages) {
                idx = 0;
                pass++;
            }
        }
        if (t == end)
            break;
        next += TICK_NS;
        if (next < t)
            next = t + TICK_NS;
        sleep_until(next < end ? next : end);
    }
    double elapsed = (double)(end - t0) / NS_PER_S;
    printf("pages=%" PRIu64 " seconds=%.6f rate_mb_s=%.3f skipped=%" PRIu64 "\n", written, elapsed,
           (double)written / PAGES_PER_MB / elapsed, skipped);
    munmap(buf, bytes);
    return 0;
}
