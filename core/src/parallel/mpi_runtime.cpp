// MPI start-up and shutdown, skipped entirely when no launcher is present.
#include "megatron/parallel/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "megatron/error.h"
#include "parallel/mpi_communicator.h"

namespace megatron {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::string MpiRuntime::detect_launcher() {
  // Each launcher family exports its own variables to the processes it starts.
  for (const char* name : {
           "OMPI_COMM_WORLD_SIZE",  // Open MPI mpirun/mpiexec
           "PMIX_RANK",             // any PMIx server: Open MPI 4+, srun --mpi=pmix, prrte
           "PMI_RANK",              // PMI-1/2: MPICH and Intel MPI (Hydra), srun --mpi=pmi2
           "PMI_SIZE",
           "MV2_COMM_WORLD_SIZE",  // MVAPICH2 mpirun_rsh
       }) {
    if (env_set(name)) return name;
  }
  // Slurm sets SLURM_PROCID for every job step, including a one-task one; only several tasks mean
  // srun started the ranks of one job.
  if (env_set("SLURM_PROCID")) {
    const char* ntasks = std::getenv("SLURM_NTASKS");
    if (ntasks != nullptr && std::atoi(ntasks) > 1) return "SLURM_PROCID";
  }
  return {};
}

MpiRuntime::MpiRuntime(Mode mode) {
  launcher_hint_ = detect_launcher();
  switch (mode) {
    case Mode::auto_detect:
      use_mpi_ = !launcher_hint_.empty();
      break;
    case Mode::force_mpi:
      use_mpi_ = true;
      break;
    case Mode::single_process:
      use_mpi_ = false;
      break;
  }
  if (!use_mpi_) return;

  int finalized = 0;
  detail::check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  if (finalized) {
    throw Error(
        "MPI was already finalized in this process and cannot be started again; create one "
        "MpiRuntime for the whole program");
  }
  int initialized = 0;
  detail::check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    detail::check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  } else {
    detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                      "MPI_Init_thread");
    finalize_ = true;
  }
  if (provided < MPI_THREAD_FUNNELED) {
    if (finalize_) MPI_Finalize();
    throw Error(std::string("MPI provides only ") + thread_level_name(provided) +
                ", expected at least MPI_THREAD_FUNNELED");
  }
  int rc = MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  if (rc != MPI_SUCCESS && finalize_) MPI_Finalize();
  detail::check_mpi(rc, "MPI_Comm_size/MPI_Comm_rank(MPI_COMM_WORLD)");
  // The rank among the processes of this node (what Megatron's LOCAL_RANK picks a GPU by).
  MPI_Comm node = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(node, &local_rank_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &local_size_);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS && finalize_) MPI_Finalize();
  detail::check_mpi(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  try {
    detail::create_mpi_half_ops();
  } catch (...) {
    detail::free_mpi_half_ops();
    if (finalize_) MPI_Finalize();
    throw;
  }
}

void MpiRuntime::abort(int exit_code) const {
  if (use_mpi_) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

MpiRuntime::~MpiRuntime() {
  // User-defined ops and types must be freed while MPI is still initialized.
  if (use_mpi_) detail::free_mpi_half_ops();
  if (finalize_) MPI_Finalize();
}

}  // namespace megatron
