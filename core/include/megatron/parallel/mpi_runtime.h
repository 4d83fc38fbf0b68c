// Owns MPI's lifetime for the process, or stands in for it when no MPI launcher started us.
#pragma once

#include <string>

namespace megatron {

// Create exactly one, at the top of main(), before any ParallelState, and destroy it last.
//
// In auto mode MPI is initialized only when the environment shows a launcher (mpirun/mpiexec,
// srun with several tasks, a PMI/PMIx server). A plain `megatron-app ...` then runs as world rank 0
// of 1 without touching MPI at all, so it starts instantly and needs no orted/PMIx daemon.
//
// Not copyable or movable; methods are safe to call from any thread once constructed.
class MpiRuntime {
 public:
  enum class Mode {
    auto_detect,     // MPI if launched by an MPI launcher, otherwise a single process
    force_mpi,       // always initialize MPI (a singleton MPI_Init when run without a launcher)
    single_process,  // never touch MPI, even under a launcher
  };

  // Throws megatron::Error when MPI cannot be initialized, was already finalized in this process,
  // or cannot provide MPI_THREAD_FUNNELED. If MPI was already initialized by someone else, it is
  // used as it is and left for them to finalize.
  explicit MpiRuntime(Mode mode = Mode::auto_detect);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }
  // This process's rank among those on the same node (0 without MPI).
  int local_rank() const { return local_rank_; }
  // How many of the job's processes run on this node (1 without MPI).
  int local_size() const { return local_size_; }
  // True when collectives go through MPI (world groups are MPI communicators).
  bool launched_by_mpi() const { return use_mpi_; }
  // The environment variable that revealed the launcher (e.g. "OMPI_COMM_WORLD_SIZE"), or empty.
  const std::string& launcher_hint() const { return launcher_hint_; }

  // The launcher evidence in the current environment, or empty when there is none.
  static std::string detect_launcher();

  // Ends every rank of the job with `exit_code` (MPI_Abort under MPI, std::exit otherwise). For
  // errors on some ranks while others may wait in a collective, where returning would hang.
  [[noreturn]] void abort(int exit_code) const;

 private:
  bool use_mpi_ = false;
  bool finalize_ = false;  // only the runtime that called MPI_Init_thread finalizes
  int world_size_ = 1;
  int world_rank_ = 0;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string launcher_hint_;
};

}  // namespace megatron
