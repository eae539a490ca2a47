/*
 * Self-test of qmpwatch.c (make -C probes check, also under ASan/UBSan): over a socketpair,
 * each write is seen by the watch no earlier than it was made and before the reader's own time;
 * bytes the reader consumed before the watch looked give the reader's time; vrw_stop joins.
 */
#include "qmpwatch.c"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pause_ms(long ms)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
	nanosleep(&ts, NULL);
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "qmpwatch selftest FAILED: " __VA_ARGS__);                 \
			fputc('\n', stderr);                                                       \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

int main(void)
{
	int sv[2];
	char buf[64];
	int64_t fed = 0;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
	struct vrw *w = vrw_start(sv[0], 0);
	CHECK(w, "vrw_start: %s", strerror(errno));
	pause_ms(20);
	for (int i = 0; i < 20; i++) {
		int64_t t0 = now_ns();
		CHECK(write(sv[1], "0123456789", 10) == 10, "write");
		pause_ms(5); /* the watch has looked; the reader comes later */
		ssize_t n = read(sv[0], buf, sizeof(buf));
		CHECK(n == 10, "read %zd", n);
		fed += n;
		int64_t later = now_ns();
		int64_t t = vrw_stamp(w, fed, later);
		vrw_set_fed(w, fed);
		CHECK(t >= t0, "write %d stamped %lld ns before it was made", i, (long long)(t0 - t));
		CHECK(t < t0 + 4000000, "write %d stamped %.3f ms after it was made (the watch missed it)", i,
		      (t - t0) / 1e6);
	}
	/* a stamp for bytes beyond anything seen is the caller's own time */
	int64_t mine = now_ns();
	CHECK(vrw_stamp(w, fed + 1, mine) == mine, "unseen bytes got a watch time");
	vrw_stop(w);
	close(sv[0]);
	close(sv[1]);
	puts("qmpwatch selftest: ok");
	return 0;
}
