/* The init re-exec experiment's baseline (bench/startup.sh): a small static executable that
 * makes the sealed init's early namespaces the way cofferdam's init does before it reads
 * its plan, then exits. Same steps, same order: parent-death signal, a user namespace with
 * the caller's uid and gid mapped to themselves (setgroups denied), then the mount, pid,
 * network, IPC and UTS namespaces in one unshare, each namespace's inode read before and
 * after (as the init's readings do). It is not cofferdam code and runs nothing after that:
 * the difference against `cofferdam __cofferdam-sandbox-init sealed:UID:GID:own` with no
 * plan channel is the cost of executing, starting and tearing down the large binary. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static int put(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

static void inode(const char *kind) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/self/ns/%s", kind);
  (void)stat(path, &st);
}

int main(void) {
  static const char *kinds[] = {"mnt", "pid", "net", "ipc", "uts"};
  char map[64];
  unsigned uid = getuid(), gid = getgid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  inode("user");
  if (unshare(CLONE_NEWUSER) != 0) return 1;
  inode("user");
  put("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
  if (put("/proc/self/uid_map", map) != 0) return 2;
  snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
  if (put("/proc/self/gid_map", map) != 0) return 3;
  for (unsigned i = 0; i < 5; i++) inode(kinds[i]);
  if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0)
    return 4;
  for (unsigned i = 0; i < 5; i++) inode(kinds[i]);
  return 0;
}
