// The pod sandbox of the e2e cluster (the "pause" container): holds the
// pod's namespaces, reaps the zombies of processes that share its PID
// namespace, and exits on SIGINT or SIGTERM.
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    perror("pause: sigprocmask");
    return 1;
  }
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGCHLD) {
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
      continue;
    }
    return 0;
  }
}
