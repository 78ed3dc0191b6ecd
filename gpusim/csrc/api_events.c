/*
 * Event notification (the kfd SMI event fd, simulated): the injector appends
 * lines "<event hex> <message>\n" -- the kernel's own format -- to
 * gpu<i>.events; each process keeps a cursor per GPU, starting at the end of
 * the file when it subscribes, so it sees only events that happen afterwards.
 */
#define _GNU_SOURCE
#include "gpusim.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void events_path(const struct gpusim_gpu *g, char *path, size_t cap) {
    const char *dir = gpusim_dir();
    snprintf(path, cap, "%s/gpu%d.events", dir ? dir : ".", g->index);
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : 0;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_init_gpu_event_notification(amdsmi_processor_handle h) {
    struct gpusim_gpu *g;
    struct gpusim_gpu_state st;
    amdsmi_status_t r = gpusim_enter(h, &g, &st);
    if (r != AMDSMI_STATUS_SUCCESS) return r;
    char path[4096];
    events_path(g, path, sizeof path);
    g->evt_enabled = 1;
    g->evt_mask = 0;
    g->evt_cursor = file_size(path);
    return AMDSMI_STATUS_SUCCESS;
}

/* rocm_smi answers RSMI_INITIALIZATION_ERROR here, which amdsmi's status map turns into NOT_INIT. */
GPUSIM_EXPORT amdsmi_status_t amdsmi_set_gpu_event_notification_mask(amdsmi_processor_handle h, uint64_t mask) {
    struct gpusim_gpu *g;
    struct gpusim_gpu_state st;
    amdsmi_status_t r = gpusim_enter(h, &g, &st);
    if (r != AMDSMI_STATUS_SUCCESS) return r;
    if (!g->evt_enabled) return AMDSMI_STATUS_NOT_INIT;
    g->evt_mask = mask;
    return AMDSMI_STATUS_SUCCESS;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_stop_gpu_event_notification(amdsmi_processor_handle h) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    struct gpusim_gpu *g = (struct gpusim_gpu *)h;
    if (g < gpusim_gpus || g >= gpusim_gpus + gpusim_ngpus || !g->evt_enabled) return AMDSMI_STATUS_INVAL;
    g->evt_enabled = 0;
    return AMDSMI_STATUS_SUCCESS;
}

/* Moves complete, unseen, masked-in event lines of one GPU into data; returns how many. */
static uint32_t drain(struct gpusim_gpu *g, amdsmi_evt_notification_data_t *data, uint32_t room) {
    char path[4096], buf[16384];
    events_path(g, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, g->evt_cursor);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    uint32_t out = 0;
    char *line = buf;
    char *nl;
    while (out < room && (nl = strchr(line, '\n')) != NULL) {
        *nl = '\0';
        g->evt_cursor += (long)(nl - line) + 1;
        char *rest = NULL;
        unsigned long ev = strtoul(line, &rest, 16);
        if (rest != line && ev > AMDSMI_EVT_NOTIF_NONE && ev <= AMDSMI_EVT_NOTIF_LAST &&
            (g->evt_mask & (1ull << (ev - 1)))) {
            amdsmi_evt_notification_data_t *d = &data[out++];
            memset(d, 0, sizeof *d);
            d->processor_handle = g;
            d->event = (uint32_t)ev;
            while (*rest && isspace((unsigned char)*rest)) rest++;
            /* rocm_smi reads the message with fscanf("%x %63s"): one word of at most 63 chars. */
            size_t len = strcspn(rest, " \t");
            if (len > MAX_EVENT_NOTIFICATION_MSG_SIZE - 1) len = MAX_EVENT_NOTIFICATION_MSG_SIZE - 1;
            memcpy(d->message, rest, len);
        }
        line = nl + 1;
    }
    return out;
}

GPUSIM_EXPORT amdsmi_status_t amdsmi_get_gpu_event_notification(int timeout_ms, uint32_t *num_elem,
                                                                amdsmi_evt_notification_data_t *data) {
    if (!gpusim_initialized) return AMDSMI_STATUS_NOT_INIT;
    if (!num_elem || !data || *num_elem == 0) return AMDSMI_STATUS_INVAL;
    uint32_t room = *num_elem, got = 0;
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        for (int i = 0; i < gpusim_ngpus && got < room; i++)
            if (gpusim_gpus[i].evt_enabled) got += drain(&gpusim_gpus[i], data + got, room - got);
        if (got > 0 || (timeout_ms >= 0 && now_ms() >= deadline)) break;
        gpusim_sleep_ms(10);
    }
    *num_elem = got;
    return got ? AMDSMI_STATUS_SUCCESS : AMDSMI_STATUS_NO_DATA;
}
