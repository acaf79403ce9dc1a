# The MPI path end to end on the emulated build: `mpirun -np 2 phasebench-emu run
# --verify-only` (two processes on this machine, one emulated GPU each, NCCL's
# stand-in between them over shared memory): the collectives and the tiny model's
# tensor-parallel layer span both ranks and verify on each; rank 0 alone prints;
# asking for points that would not span the ranks is refused, as is timing.
# Run by CTest: cmake -DMPIEXEC=... -DPHASEBENCH_EMU_BINARY=... -DMODEL=... -P mpi_sweep.cmake
set(mpirun ${MPIEXEC} --oversubscribe -np 2 -x PB_EMU_DEVICES=2 -x PB_EMU_NCCL_TIMEOUT_S=60)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)  # CI containers run as root
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
set(ENV{OMPI_MCA_btl} "self,vader")  # this machine only: no network probing
set(ENV{OMPI_MCA_btl_vader_single_copy_mechanism} none)
set(ENV{OMPI_MCA_rmaps_base_oversubscribe} 1)

execute_process(
  COMMAND ${mpirun} ${PHASEBENCH_EMU_BINARY} run --backend=cuda --verify-only --model ${MODEL} --dtype bf16,fp32
          --ops collectives,collectives_sizes,layer --axis collectives.batch=1,3 --axis collectives.tokens=17
          --axis collectives_sizes.bytes=4096,100000
          --axis layer.prefill_batch=2 --axis layer.prompt=17 --axis layer.decode_batch=3 --axis layer.context=33
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun -np 2 phasebench-emu --verify-only exited with ${rc}")
endif()
if(out MATCHES "WRONG|ERROR|skipped ")
  message(FATAL_ERROR "a point was wrong, failed or was skipped under mpirun")
endif()
foreach(want
    "ok +prefill/layer/tiny-llama/bf16/batch:2/prompt:17/gpus:2"
    "ok +decode/layer/tiny-llama/bf16/batch:3/context:33/gpus:2"
    "ok +decode/all_reduce/tiny-llama.layer_all_reduce/bf16/gpus:2/batch:3"
    "ok +prefill/all_reduce/tiny-llama.layer_all_reduce/fp32/gpus:2/tokens:17"
    "ok +free/all_to_all/sizes/bf16/gpus:2/bytes:100000"
    "ok +free/reduce_scatter/sizes/fp32/gpus:2/bytes:4096"
    "rank 0 of 2" "rank 1 of 2")
  if(NOT "${out}${err}" MATCHES "${want}")
    message(FATAL_ERROR "under mpirun, nothing matches '${want}'")
  endif()
endforeach()
# Rank 0 prints the verification; rank 1's stdout is silent.
string(REGEX MATCHALL "verifying [0-9]+ point" heads "${out}")
list(LENGTH heads n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${n} ranks printed the verification; rank 0 alone should")
endif()

# A point one rank cannot run (rank 1 has 0.45 GiB of device memory, a 300 MB
# all-reduce needs 0.6) is skipped by both, with rank 1's reason, and the next runs:
# the ranks agree on every point, so their collective calls stay in step.
set(sizes --ops collectives_sizes --axis collectives_sizes.bytes=300000000,4096
          --axis collectives_sizes.collective=all_reduce --dtype bf16)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe -x PB_EMU_DEVICES=2 -x PB_EMU_NCCL_TIMEOUT_S=60
          -np 1 ${PHASEBENCH_EMU_BINARY} run --backend=cuda --verify-only ${sizes}
          : -np 1 -x PB_EMU_MEMORY_GIB=0.45 ${PHASEBENCH_EMU_BINARY} run --backend=cuda --verify-only ${sizes}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT out MATCHES "skipped free/all_reduce/sizes/bf16/gpus:2/bytes:300000000[^\n]*GiB free"
   OR NOT out MATCHES "ok +free/all_reduce/sizes/bf16/gpus:2/bytes:4096")
  message(FATAL_ERROR "a point one rank cannot run should be skipped by both, the next verified; got ${rc}: ${out}${err}")
endif()

# Refused: a group whose points would run alone on each rank, a GPU count that is
# not the rank count, and timing on the emulation. Each says why; none hangs.
foreach(case "--ops;decode_linear;only points that span the ranks run"
             "--ops;layer;--gpus;4;give --gpus 2 or leave it out")
  set(args ${case})
  list(POP_BACK args want)
  execute_process(
    COMMAND ${mpirun} ${PHASEBENCH_EMU_BINARY} run --backend=cuda --verify-only --model ${MODEL} ${args}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc EQUAL 0 OR NOT err MATCHES "${want}")
    message(FATAL_ERROR "mpirun ... ${args}: should fail saying '${want}'; got ${rc}: ${out}${err}")
  endif()
endforeach()
