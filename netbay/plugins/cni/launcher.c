/* netbay-cni, compiled: the executable a CNI runtime forks for every call.

   The same exchange as client.py, without starting an interpreter (~10-15 ms here,
   against ~1 ms for this): answer VERSION, hand every other call (its CNI_* variables
   and stdin, untouched) to `netbay cni-daemon` over its Unix socket, print what the
   daemon answers and exit with its status.  Anything off the usual path -- run by
   hand, a socket path in the configuration that is not a plain string, a daemon that
   cannot be reached -- is left to client.py (exec'd with stdin replayed), so the
   caller's mistakes and "try again later" are worded in one place.  After the request
   is sent it is never retried: the daemon's failures are said here, as client.py says them.

   launcher.py compiles this with, before it, the definitions of NB_PYTHON, NB_ROOT,
   NB_VERSION, NB_DEFAULT_SOCKET, NB_TIMEOUT and NB_MAX_STDIN (C string literals, seconds and
   bytes).  Nothing is buffered without a bound: stdin up to NB_MAX_STDIN, the answer up to
   NB_MAX_ANSWER. */

#define NB_MAX_ANSWER (64 * (NB_MAX_STDIN))

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

struct buf { char *data; size_t len, cap; };

static void put(struct buf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) { perror("netbay-cni"); _exit(1); }
        b->data = d; b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0) { if (errno == EINTR) continue; return; }
        s += w; n -= (size_t)w;
    }
}

/* A CNI error result, as client.py's json.dumps writes it; exits 1. */
static void fail(int code, const char *msg) {
    struct buf out = {0};
    char head[48];
    put(&out, head, (size_t)snprintf(head, sizeof head, "{\"code\": %d, \"msg\": \"", code));
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') { esc[0] = '\\'; esc[1] = (char)*p; put(&out, esc, 2); }
        else if (*p < 0x20) put(&out, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p));
        else put(&out, (const char *)p, 1);
    }
    put(&out, "\"}\n", 3);
    write_all(1, out.data, out.len);
    _exit(1);
}

/* client.py takes over: stdin (already read, if `in` is given) replayed from memory. */
static void hand_to_python(const struct buf *in) {
    if (in) {
        int fd = memfd_create("netbay-cni-stdin", 0);
        if (fd < 0) fail(5, "netbay-cni: cannot replay stdin (memfd_create)");
        write_all(fd, in->data, in->len);
        if (lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) < 0) fail(5, "netbay-cni: cannot replay stdin");
        close(fd);
    }
    char *argv[] = {NB_PYTHON, "-IS", "-c",
                    "import sys\nsys.path.insert(0, " NB_ROOT ")\n"
                    "from netbay.plugins.cni.client import main\nmain()\n", NULL};
    execve(NB_PYTHON, argv, environ);
    fail(5, "netbay-cni: cannot start " NB_PYTHON);
}

/* "socket": "<plain path>" in the configuration, as client.socket_path reads it without
   json; NULL when the value is anything less plain (client.py then reads it with json). */
static const char *socket_path(const struct buf *in, int *plain) {
    const char *env = getenv("NETBAY_CNI_SOCKET");
    *plain = 1;
    if (env && *env) return env;
    const char *at = memmem(in->data, in->len, "\"socket\"", 8);
    if (!at) return NB_DEFAULT_SOCKET;
    const char *p = at + 8, *end = in->data + in->len;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < end && *p == ':') {
        p++;
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p < end && *p == '"') {
            const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
            if (q && q > p + 1 && !memchr(p + 1, '\\', (size_t)(q - p - 1))) {
                char *path = strndup(p + 1, (size_t)(q - p - 1));
                if (path && !memchr(path, '\0', (size_t)(q - p - 1)) && strlen(path) == (size_t)(q - p - 1))
                    return path;
            }
        }
    }
    *plain = 0;
    return NULL;
}

static void os_error(const char *path, int err) {
    char msg[4200];
    if (err == EAGAIN || err == EWOULDBLOCK) {
        snprintf(msg, sizeof msg, "netbay CNI daemon at %s did not answer within %d s", path, NB_TIMEOUT);
        fail(11, msg);
    }
    snprintf(msg, sizeof msg, "netbay CNI daemon at %s: [Errno %d] %s", path, err, strerror(err));
    fail(5, msg);
}

int main(void) {
    const char *cmd = getenv("CNI_COMMAND");
    if (!cmd || !*cmd) hand_to_python(NULL);  /* run by hand: client.py says what this is */
    if (!strcmp(cmd, "VERSION")) {
        write_all(1, NB_VERSION "\n", sizeof NB_VERSION);
        return 0;
    }
    struct buf in = {0};
    for (;;) {
        char chunk[65536];
        ssize_t n = read(0, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            char msg[256];
            snprintf(msg, sizeof msg, "error reading from stdin: [Errno %d] %s", errno, strerror(errno));
            fail(5, msg);
        }
        if (n == 0) break;
        put(&in, chunk, (size_t)n);
        if (in.len > (size_t)(NB_MAX_STDIN)) {
            char msg[128];
            snprintf(msg, sizeof msg, "netbay-cni: the network configuration is larger than %d bytes", NB_MAX_STDIN);
            fail(6, msg);
        }
    }
    int plain;
    const char *path = socket_path(&in, &plain);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (!plain || strlen(path) >= sizeof addr.sun_path) hand_to_python(&in);
    strcpy(addr.sun_path, path);

    struct buf req = {0};
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "CNI_", 4)) put(&req, *e, strlen(*e) + 1);
    put(&req, "", 1);
    put(&req, in.data ? in.data : "", in.len);

    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) hand_to_python(&in);
    struct timeval tv = {.tv_sec = NB_TIMEOUT};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
        close(s);
        hand_to_python(&in);  /* not running, refused, ...: client.py words it (and the caller's mistakes) */
    }
    for (size_t off = 0; off < req.len;) {
        ssize_t w = send(s, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) os_error(path, errno);
        off += (size_t)w;
    }
    shutdown(s, SHUT_WR);
    struct buf ans = {0};
    for (;;) {
        char chunk[65536];
        ssize_t n = recv(s, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) os_error(path, errno);
        if (n == 0) break;
        put(&ans, chunk, (size_t)n);
        if (ans.len > (size_t)(NB_MAX_ANSWER)) {
            char msg[4200];
            snprintf(msg, sizeof msg, "netbay CNI daemon at %s answered more than %d bytes", path, NB_MAX_ANSWER);
            fail(5, msg);
        }
    }
    if (!ans.len || (ans.data[0] != '0' && ans.data[0] != '1')) {
        char msg[4200];
        snprintf(msg, sizeof msg, "netbay CNI daemon at %s gave no answer (did it exit?)", path);
        fail(999, msg);
    }
    if (ans.len > 1) {
        put(&ans, "\n", 1);
        write_all(1, ans.data + 1, ans.len - 1);
    }
    return ans.data[0] - '0';
}
