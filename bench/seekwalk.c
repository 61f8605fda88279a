/*
 * seekwalk: walk a file with alternating SEEK_DATA / SEEK_HOLE from offset 0
 * to the end, as cp and tar --sparse do, and report the cost per lseek call.
 *
 *   seekwalk FILE [RUNS]
 *
 * Each run opens the file anew (a fresh per-open cursor), walks it, and
 * prints: calls, data ranges, data bytes, total ns, ns per call. With RUNS > 1
 * the last line is the median ns per call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [RUNS]\n", argv[0]);
		return 2;
	}
	int runs = argc > 2 ? atoi(argv[2]) : 1;
	if (runs < 1)
		runs = 1;
	double *per_call = calloc(runs, sizeof(double));
	for (int r = 0; r < runs; r++) {
		int fd = open(argv[1], O_RDONLY);
		if (fd < 0) {
			perror(argv[1]);
			return 1;
		}
		long calls = 0, ranges = 0;
		long long data = 0;
		off_t pos = 0;
		double t0 = now_ns();
		for (;;) {
			off_t d = lseek(fd, pos, SEEK_DATA);
			calls++;
			if (d < 0) {
				if (errno == ENXIO)
					break;
				perror("lseek SEEK_DATA");
				return 1;
			}
			off_t h = lseek(fd, d, SEEK_HOLE);
			calls++;
			if (h < 0) {
				perror("lseek SEEK_HOLE");
				return 1;
			}
			if (h <= d) {
				fprintf(stderr, "SEEK_HOLE %lld <= SEEK_DATA %lld\n",
					(long long)h, (long long)d);
				return 1;
			}
			ranges++;
			data += h - d;
			pos = h;
		}
		double t = now_ns() - t0;
		close(fd);
		per_call[r] = t / calls;
		printf("calls %ld ranges %ld data_bytes %lld total_ns %.0f ns_per_call %.1f\n",
		       calls, ranges, data, t, per_call[r]);
	}
	qsort(per_call, runs, sizeof(double), cmp_double);
	if (runs > 1)
		printf("median_ns_per_call %.1f\n", per_call[runs / 2]);
	free(per_call);
	return 0;
}
