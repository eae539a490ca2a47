/*
 * qmpwatch: when bytes were first seen queued on a QMP socket, stamped without Python's GIL.
 *
 * The KVM driver reads QMP through qemu.qmp on an asyncio loop; the loop sees an arrival only
 * after asyncio's read path in Python.  A thread blocked in its own edge-triggered epoll on the
 * same socket wakes with every arrival; this one then reads how many bytes wait unread
 * (FIONREAD) and CLOCK_REALTIME, in C, with no interpreter lock to wait for.  It reads no data:
 * the loop consumes every byte, so the protocol client sees the stream unchanged.
 *
 * Each wake-up with bytes waiting is kept as (stream offset known to have arrived, time):
 * `fed` (bytes the loop has handed on, set by the caller after each read and loaded before the
 * ioctl, so never more than the kernel had given out) plus the bytes waiting; the clock is read
 * after the ioctl.  The offset is thus never beyond what had arrived by the time, and
 * vrw_stamp() never gives a time before a byte arrived.
 *
 * Loaded with ctypes by migrate/drivers/kvm/qmp.py: vrw_start, vrw_set_fed, vrw_stamp, vrw_stop.
 * One writer (the thread) and one reader (the caller of vrw_stamp) share a ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define VRW_RING 4096u

struct vrw_entry {
	int64_t offset;
	int64_t t_ns;
};

struct vrw {
	int fd;
	int ep;
	int wake[2];
	pthread_t thread;
	int rt_priority; /* SCHED_FIFO priority of the thread; 0: normal */
	int rt_error;    /* pthread_setschedparam's error, 0 if it took */
	_Atomic int64_t fed;
	_Atomic uint64_t head; /* entries written */
	uint64_t tail;         /* next entry to read (reader only) */
	struct vrw_entry ring[VRW_RING];
};

static void *vrw_run(void *arg)
{
	struct vrw *w = arg;
	struct epoll_event evs[4];
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals stay with the interpreter's threads */
	if (w->rt_priority > 0) {
		/* woken with the loop's thread (and, under TCG, QEMU's busy ones) on few cores, a
		 * normal thread waits for a core; a real-time one takes it at once (its work per
		 * wake-up is an ioctl and a clock read).  Without the privilege it stays normal. */
		struct sched_param sp = {.sched_priority = w->rt_priority};
		w->rt_error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
	}
	for (;;) {
		int n = epoll_wait(w->ep, evs, 4, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		for (int i = 0; i < n; i++)
			if (evs[i].data.fd == w->wake[0])
				return NULL;
		int64_t fed = atomic_load_explicit(&w->fed, memory_order_acquire);
		int waiting = 0;
		if (ioctl(w->fd, FIONREAD, &waiting) < 0)
			return NULL; /* the connection is gone */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (waiting <= 0)
			continue; /* the loop read it first */
		uint64_t h = atomic_load_explicit(&w->head, memory_order_relaxed);
		w->ring[h % VRW_RING].offset = fed + waiting;
		w->ring[h % VRW_RING].t_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
		atomic_store_explicit(&w->head, h + 1, memory_order_release);
	}
}

/* Start watching socket `fd` (thread at SCHED_FIFO `rt_priority`, 0: normal); NULL with errno
 * set on failure. */
struct vrw *vrw_start(int fd, int rt_priority)
{
	struct vrw *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->fd = fd;
	w->rt_priority = rt_priority;
	w->wake[0] = w->wake[1] = -1;
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	if (w->ep < 0)
		goto fail;
	if (pipe2(w->wake, O_CLOEXEC) < 0)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd};
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail;
	struct epoll_event wk = {.events = EPOLLIN, .data.fd = w->wake[0]};
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake[0], &wk) < 0)
		goto fail;
	int err = pthread_create(&w->thread, NULL, vrw_run, w);
	if (err) {
		errno = err;
		goto fail;
	}
	/* named before this returns (ps -L, /proc/<pid>/task/<tid>/comm), not once it first runs */
	pthread_setname_np(w->thread, "vrmig-qmpwatch");
	return w;
fail:;
	int saved = errno;
	for (int i = 0; i < 2; i++)
		if (w->wake[i] >= 0)
			close(w->wake[i]);
	if (w->ep >= 0)
		close(w->ep);
	free(w);
	errno = saved;
	return NULL;
}

/* The caller has handed the stream's first `fed` bytes on. */
void vrw_set_fed(struct vrw *w, int64_t fed)
{
	if (!w)
		return;
	atomic_store_explicit(&w->fed, fed, memory_order_release);
}

/* The earliest time at which the stream's first `end` bytes were known to have arrived, or
 * `now_ns` if the thread saw them no earlier. */
int64_t vrw_stamp(struct vrw *w, int64_t end, int64_t now_ns)
{
	if (!w)
		return now_ns;
	uint64_t h = atomic_load_explicit(&w->head, memory_order_acquire);
	if (h - w->tail > VRW_RING)
		w->tail = h - VRW_RING; /* overwritten: older entries are gone */
	while (w->tail < h) {
		struct vrw_entry e = w->ring[w->tail % VRW_RING];
		if (atomic_load_explicit(&w->head, memory_order_acquire) - w->tail > VRW_RING)
			return now_ns; /* overwritten while read */
		if (e.offset >= end)
			return e.t_ns < now_ns ? e.t_ns : now_ns;
		w->tail++;
	}
	return now_ns;
}

/* Stop the thread, close what vrw_start opened (not the socket) and free `w`. */
void vrw_stop(struct vrw *w)
{
	if (!w)
		return;
	ssize_t r;
	do
		r = write(w->wake[1], "x", 1);
	while (r < 0 && errno == EINTR);
	pthread_join(w->thread, NULL);
	close(w->wake[0]);
	close(w->wake[1]);
	close(w->ep);
	free(w);
}
