#pragma once
/// @file temp_files.hpp
/// pkscan's temporary output files: how they are named, the process-wide registry of the ones
/// not yet committed, the commit of several of them as one unit, and the clean-up of files left
/// by a process that was killed (SIGKILL) or lost its machine.
///
/// A temporary file for the target `DIR/NAME` is `DIR/.NAME.pkscan-tmp.HOST.PID.XXXXXX`: hidden,
/// in the target's directory (so that rename() moves it into place), recognisable as pkscan's,
/// naming the target, the host (letters, digits and '-' of gethostname(), at most 32) and the
/// process that owns it (`NAME` is cut to 128 bytes). Such a file is an orphan when its owner
/// no longer runs: same host, and no process PID exists (or PID is this process, which does
/// not know the file). Files of another host are never removed (on a shared file system that
/// host's run may still be writing them).
///
/// Commits of several files (commit_temp_files) are journaled: `DIR/.NAME.pkscan-commit`
/// (`NAME` of the unit's main file) lists the renames and removals. It is created (atomically,
/// by link()) once every file is complete, before the first rename, and removed after the last;
/// it also keeps two processes from committing to the same unit at the same time. A journal left
/// behind (the process was killed or a rename failed half-way) marks the unit as inconsistent
/// (`pkscan plot` then does not pair the main file with its summary) until the next run to the
/// same path completes that commit (roll forward; recover_commit).
///
/// Signals: the registry is guarded by one mutex, held while a file is created, removed or
/// committed. A signal-handling thread that calls discard_temp_files() therefore waits for a
/// commit in progress to complete, and never sees a half-created file.
///
/// Thread-safety: every function may be called from any thread.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::output {

/// `DIR/.NAME.pkscan-tmp.` for the target `DIR/NAME` (`NAME` cut to 128 bytes): the start of
/// every temporary file name for that target.
std::string temp_prefix(const std::string& path);

/// `DIR/.NAME.pkscan-commit`: the commit journal of the unit whose main file is `path`.
std::string commit_journal_path(const std::string& path);

/// The longest name (without the directory) that a temporary file for `path`, or the commit
/// journal of a unit whose main file is `path`, can have (at most 191 bytes, whatever `path`).
std::size_t longest_temp_name(const std::string& path);

/// Creates and registers a temporary file for `path` (mode 0644, in its directory), after
/// removing the orphans of earlier runs for `path` (remove_orphaned_temp_files).
/// @return the open file descriptor (the caller closes it); `temp` receives its path.
/// @throws Error "cannot create output file PATH: reason" when it cannot be created
int create_temp_file(const std::string& path, std::string& temp);

/// Creates and registers a temporary directory for `path` (mode 0700), named as a temporary
/// file, after the same clean-up. It may hold plain files (no subdirectories): it is removed
/// with them by remove_temp_file, discard_temp_files and the orphan clean-up.
/// @return its path. @throws Error "cannot create PATH: reason" when it cannot be created
std::string create_temp_dir(const std::string& path);

/// Removes (unlinks) a registered temporary file and forgets it. Never throws.
void remove_temp_file(const std::string& temp) noexcept;

/// Forgets a registered temporary file without removing it (it has been renamed). Never throws.
void forget_temp_file(const std::string& temp) noexcept;

/// Commits temporary files as one unit: renames each `renames[i].first` (a registered
/// temporary file, complete, synced and closed) over `renames[i].second`, and removes each path
/// of `removals` (companions of an earlier run that this unit does not produce; a missing one
/// is fine), while holding the registry's lock. Every path must lie in the directory of `main`.
/// More than one operation is journaled (see above); when another live process is committing
/// the same unit, waits for it (up to 30 s).
/// @throws InvalidArgument when a path lies in another directory; Error when a rename or removal
///         fails (before the first one: nothing changed and the temporary files are removed;
///         after it: the journal stays, and the next run to `main` completes the commit).
void commit_temp_files(const std::string& main,
                       const std::vector<std::pair<std::string, std::string>>& renames,
                       const std::vector<std::string>& removals);

/// Completes the interrupted commit of the unit whose main file is `path`, when its journal
/// exists and its owner no longer runs (renames the files still waiting, removes the
/// removals, then the journal). @return true when a journal was rolled forward. Never throws.
bool recover_commit(const std::string& path) noexcept;

/// Removes the orphaned temporary files for `path` (see above) after recover_commit(path).
/// Run by create_temp_file. @return how many files were removed. Never throws.
std::size_t remove_orphaned_temp_files(const std::string& path) noexcept;

/// For a process that is about to end on a signal: removes every registered temporary file.
/// Waits for a commit or file creation in progress in another thread to complete. With
/// `hold` (what a signal handler wants), the registry stays locked afterwards, so no thread of
/// this process can create, commit or remove a file any more (such calls wait until the process
/// ends): call it from a normal thread (it locks a mutex; not from an asynchronous signal
/// handler), then end the process with _exit(). @return how many files were removed.
std::size_t discard_temp_files(bool hold) noexcept;

/// Paths of the registered temporary files (for tests and diagnostics).
std::vector<std::string> registered_temp_files();

}  // namespace pkscan::output
