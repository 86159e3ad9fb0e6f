#pragma once
// Terminating signals of the `pkscan` program (not of the in-process run_cli used by the tests):
// SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU and SIGXFSZ are blocked in every
// thread and taken by one thread that waits for them (sigwait). On one, that thread removes
// every temporary output file (output::discard_temp_files, which waits for a commit in progress
// to complete, so a signal never splits a commit), prints one line on stderr and ends the
// process with status 128 + the signal number (SIGINT 130, SIGTERM 143, SIGHUP 129). pkscan-bench
// (bench/pkscan_bench.cpp) ends the same way.

namespace pkscan::cli {

/// Blocks the signals above and starts the thread that handles them. Call it first in main(),
/// before any other thread exists (threads inherit the mask). Calling it again does nothing.
/// `program` begins the line: "pkscan: stopped by SIGINT (exit status 130); ...".
void handle_termination_signals(const char* program = "pkscan");

/// Keeps HDF5 from installing its exit handler (H5dont_atexit; call it before any other HDF5
/// call). HDF5 1.10's handler crashes (SIGSEGV in H5F__close_cb) when a file's H5Fclose failed
/// earlier, as it does after a write error (disk full, file size limit): the run that failed
/// with status 1 would end with a segmentation fault. pkscan closes every HDF5 file itself, so
/// the handler has nothing to do.
void skip_hdf5_exit_handler() noexcept;

/// Leaves out the line when a signal ends the process (the files are removed as before): the
/// ranks of an MPI run other than 0, whose rank 0 reports how the run ended.
void quiet_termination_signals() noexcept;

/// In a child process between fork() and exec(): restores the signal mask the process started
/// with (async-signal-safe).
void restore_signal_mask_in_child() noexcept;

}  // namespace pkscan::cli
