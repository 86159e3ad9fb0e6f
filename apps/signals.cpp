// Terminating signals of the pkscan program (signals.hpp).
#include "signals.hpp"

#include <hdf5.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <exception>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <thread>

namespace pkscan::cli {

namespace {

sigset_t g_original_mask;  // written once, before the handling thread exists
bool g_installed = false;
const char* g_program = "pkscan";  // written once, before the handling thread exists

sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGXFSZ})
    sigaddset(&set, s);
  return set;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGALRM:
      return "SIGALRM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    default:
      return "a signal";
  }
}

// The line is left out (quiet_termination_signals).
std::atomic<bool> g_quiet{false};

[[noreturn]] void wait_for_signals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) != 0) continue;
    // Waits for a commit in progress, removes every temporary file, and keeps the registry
    // locked so that no other thread creates or commits a file before _exit.
    output::discard_temp_files(true);
    const int status = 128 + sig;
    // On a terminal, after a progress bar drawn in place: a line of its own.
    const std::string line = std::string(::isatty(STDERR_FILENO) ? "\n" : "") + g_program +
                             ": stopped by " + signal_name(sig) + " (exit status " +
                             std::to_string(status) + "); no partial output left\n";
    if (!g_quiet.load()) {
      const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
      (void)ignored;
    }
    ::_exit(status);
  }
}

}  // namespace

void handle_termination_signals(const char* program) {
  if (g_installed) return;
  g_program = program;
  const sigset_t set = termination_signals();
  if (::pthread_sigmask(SIG_BLOCK, &set, &g_original_mask) != 0) return;
  try {
    std::thread(wait_for_signals, set).detach();
  } catch (const std::exception&) {  // no thread: the signals keep their default action
    ::pthread_sigmask(SIG_SETMASK, &g_original_mask, nullptr);
    return;
  }
  g_installed = true;
}

void skip_hdf5_exit_handler() noexcept { H5dont_atexit(); }

void quiet_termination_signals() noexcept { g_quiet.store(true); }

void restore_signal_mask_in_child() noexcept {
  if (g_installed) ::sigprocmask(SIG_SETMASK, &g_original_mask, nullptr);
}

}  // namespace pkscan::cli
