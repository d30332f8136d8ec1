// Package parallel owns data-parallel training: a small collective interface
// (Comm), its engines, gradient averaging across replicas (DDP), an
// optimizer sharded across ranks (ZeRO stages 1 and 2) whose state can be
// gathered whole for a checkpoint, and parameters sharded across ranks
// (ZeRO stage 3), gathered block by block as the model runs. Dealing the data out to the ranks is
// the data loader's job (data.LoaderConfig's Rank and Ranks); the training
// loop that combines them is train.NewDistributed, and `train -dist mpi`.
//
// memfit never implements a network layer of its own: collectives run on
// existing engines. The default build is pure Go and single-process; the
// engines are
//
//   - NewLocal(n): n ranks as goroutines of one process, exchanging through
//     shared memory (single-machine data parallelism over several devices,
//     and the harness of every test);
//   - NewMPI, with the build tag mpi: MPI_COMM_WORLD through cgo to Open
//     MPI (Debian: apt-get install libopenmpi-dev openmpi-bin), for CPU
//     ranks on one or many machines launched with mpirun;
//   - NewMeta(rank, n): one rank of n that exchanges nothing, for planning
//     one rank's memory on the meta device (train's -plan -ranks N);
//   - NewNCCL, with the build tag cuda: NCCL over one GPU per rank,
//     bootstrapped through another Comm (MPI) that carries NCCL's unique
//     id. Collectives run on the tensors' GPU memory directly, on the
//     device's compute stream (cuda.Device.OnStream), and wait for the
//     GPU with a watchdog that aborts the communicator after the timeout
//     (NCCLTimeout) or on NCCL's asynchronous error. `train -dist mpi
//     -device cuda` uses it, each rank on the GPU of its local rank.
//
// # Comm
//
// AllReduce (Sum, Avg, Max, Min), ReduceScatter, AllGather, Broadcast and
// Barrier on contiguous F32 tensors of any device, in place; errors are
// returned. Every rank calls the same collectives in the same order. MPI
// and NewLocal work in place on a CPU tensor's memory (tensor.View;
// NewLocal converts to float64 in Go memory, to reduce in rank order) and
// NCCL on a GPU tensor's; otherwise (GPU tensors without NCCL) values are
// staged through the host: read with Float64s (a transient F64 copy on
// the device, 8 bytes per element, memory.Temporary) and written back with
// SetFloat32s (a transient F32 copy). So on the CPU device a collective
// allocates nothing the allocator counts, as a plan's (NewMeta) does not.
//
// Failures. A rank of NewLocal that does not join a collective within the
// timeout (Timeout, default DefaultTimeout), or that closes its Comm while
// the others wait for it, makes them return a *RankError naming it; the
// group is then broken and every later collective fails at once. Ranks
// calling different collectives (or lengths) get a *RankError naming the
// rank out of step. Under MPI, a rank that exits makes mpirun end the job
// within about a second, naming it ("Process name: [[job,1],R]", R the
// rank); a rank that hangs without exiting makes the others' watchdog
// (MPITimeout) return an error naming the collective after the timeout —
// the program should then exit so that mpirun ends the job. MPI itself
// cannot tell which rank a blocked collective waits for.
//
// MPI runs with MPI_THREAD_FUNNELED: every MPI call runs on one goroutine
// locked to the thread that initialised MPI, and MPI_ERRORS_RETURN makes
// MPI errors returned errors. Compile-check and run the two-rank check
// (collectives, then DDP and ZeRO 1, 2 and 3 against single-process training,
// with AdamW, and with Adafactor for DDP and ZeRO 1 and 2):
//
//	go vet -tags mpi ./parallel/...
//	go build -tags mpi -o /tmp/mpicheck ./parallel/internal/mpicheck
//	mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpicheck
//	mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpicheck -die 1   # a rank exits
//	mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpicheck -hang 1 -timeout 3s
//
// (--allow-run-as-root only when running as root, --oversubscribe when
// there are fewer cores than ranks.)
//
// # Data parallelism
//
// Every rank builds the same model on its own device. NewDDP broadcasts
// rank 0's parameters; after the backward of the last micro-batch of an
// accumulation window, ReduceGradients replaces each gradient by the mean
// over the ranks — with equal per-rank batches and mean losses, the
// gradient of the mean loss over the global batch — so gradient
// accumulation communicates once per optimizer step. Gradients are packed
// into buckets of DDPConfig.BucketBytes (memory.Temporary, one bucket at a
// time) and all-reduced bucket by bucket. A parameter without a gradient
// on any rank is skipped; one with a gradient on some ranks only is
// averaged with zeros.
//
// The data: data.LoaderConfig{Rank, Ranks} gives each rank its block of
// every global batch of the epoch's order, which does not depend on the
// rank count, so N ranks of batch B see step for step what one process of
// batch N·B sees.
//
// # ZeRO
//
// NewZeRO numbers the parameters as one flat vector of P elements padded
// to N·⌈P/N⌉ and gives rank r the range [r·⌈P/N⌉, (r+1)·⌈P/N⌉) ∩ [0, P).
// Its optim.Optimizer is built over 1-D views of the owned pieces of the
// parameters ("layers.0.weight[195:240]"), so optimizer state exists only
// for owned elements. Step reduce-scatters the averaged gradients bucket by
// bucket, steps the shard optimizer and all-gathers the parameters.
//
// Memory per rank for P F32 parameters with Adam (memfit keeps F32 master
// weights; the 16Ψ of the paper's mixed precision is 4Ψ parameters + 4Ψ
// gradients + 8Ψ state here), N ranks:
//
//	no sharding (DDP)  parameters 4P + gradients 4P   + Adam 8P   = 16P
//	ZeRO stage 1       parameters 4P + gradients 4P   + Adam 8P/N
//	ZeRO stage 2       parameters 4P + gradients 4P/N + Adam 8P/N (after the reduction)
//
// "8P/N" is 8 bytes per owned element: 8·⌈P/N⌉ on every rank but the last,
// which owns P - (N-1)·⌈P/N⌉ (the padding). Measured on the 389-parameter
// test MLP with 2 ranks: optimizer state 1560 and 1552 B (DDP: 3112 B on
// each); gradients after a stage-2 reduction 780 and 776 B (stage 1:
// 1556 B); temporaries during the reduction with 256 B buckets 768 B (DDP)
// and 896 B (ZeRO): the bucket plus its host staging.
//
// Stage 2 has two ways to reduce. Plain ReduceGradients, after backward,
// writes each rank's averaged range into the full gradients, then moves
// every owned piece into a buffer of its own and releases each full
// gradient as soon as nothing owned is left in it, so Gradient only falls,
// from 4P to 4P/N. ReduceDuringBackward (overlap.go; what train does)
// arms the next backward instead: the parameters' tensor.OnGradReady hooks
// all-reduce contiguous buckets of the flat vector as backward completes
// them, keep the owned part and release the full gradients, so backward
// itself never holds all of them (measured: 0.59·4P at N = 2); it costs an
// all-reduce (twice a reduce-scatter's bytes) and needs every rank to use
// the same parameters in the same graph. With accumulation train arms
// every micro-batch's backward, each adding its averaged buckets into the
// shard's gradients, so no full gradient outlives its micro-batch (one
// reduction per micro-batch, as DeepSpeed's stage 2; stage 1 is the
// choice that communicates once per step and keeps them all, as DDP).
// Under stage 2 parameters have no
// gradient after ReduceGradients; the averaged gradient of the owned range
// is on the shard views (Shard). ClipGradNorm and GradNorm all-reduce the
// norm.
//
// State formats. The optimizer says where a parameter may be cut
// (optim.Optimizer.ShardAlignment). 8-bit Adam keeps a scale per 2048
// elements: every parameter starts on a multiple of 2048 in the flat
// vector and S is one too, so shards begin on the blocks. Adafactor
// updates each tensor whole (its factored statistics, relative step and
// update clipping span it): a parameter that would straddle a rank
// boundary starts at that boundary instead and S is the least that fits,
// so each rank owns whole tensors, which its optimizer sees with their
// names and shapes; the ranks' state is then unequal (a rank's is its
// tensors' row and column statistics) and the collectives carry the gaps
// as zeros (N·S ≥ P; S is at least the largest tensor).
//
// BF16 parameters (train's -weights bf16) and their BF16 gradients are
// sharded as F32 ones: buckets and collectives stay F32, a BF16 value is
// widened into them exactly, gradients are averaged in F32 and rounded to
// nearest into the BF16 gradient, and gathered parameters come back
// exactly; a stage-2 shard gradient is BF16 (2 bytes per owned element).
// Each piece's stochastic rounding draws its parameter's bits
// (optim.Optimizer.SetRoundingOrigin), so stages 1 and 2 compute what DDP
// does, bit for bit.
//
// Checkpoints. ExportFull gathers the shards into the state an unsharded
// optimizer over the same parameters would export (a collective), and
// ImportFull takes this rank's range of such a state, so a checkpoint
// resumes on any number of ranks, with or without ZeRO. Stages 1 and 2
// and stage 3 share one implementation of both (zerostate.go): each
// describes only its layout, where an element of a parameter lies in the
// ranks' local vectors laid end to end (stage 3's: group by group).
//
// # ZeRO stage 3
//
// NewZeRO3 shards the parameters themselves (PyTorch's FSDP). It cuts
// them into groups — one per block of an nn.Model (Blocks), and the root
// group of the parameters outside the blocks (a GPT's embeddings and
// final norm) — and moves each group into one flat storage
// (tensor.Flatten): the parameters stay the model's tensors, with their
// names and hooks, as views of it. Each group is laid out as ZeRO lays out
// the whole model (padded to N·S, aligned to the optimizer's blocks) and
// rank r keeps elements [r·S, (r+1)·S) in a shard of its own; the flat
// storage is evicted (tensor.Evict: its memory freed, every handle on it
// still valid, any use an error naming the tensor) except while the group
// runs. The optimizer is built over views of the shards, one per owned
// piece of a trainable parameter, as for ZeRO.
//
// Runner wraps the model's block runner (a checkpoint policy, or
// nn.RunSequential); each block runs as:
//
//	forward:  all-gather the group into its storage (Rematerialize) → the
//	          block → evict
//	backward: an autograd node on the block's output gathers the group
//	          again before the block's backward; one on its input (or,
//	          when the input needs no gradient, the parameters'
//	          OnGradReady hooks) sees it end: the group's gradients are
//	          reduce-scattered (Avg) into this rank's shard gradient
//	          (memory.Gradient, S elements, summed over micro-batches),
//	          each full gradient released as it is packed, and the group
//	          evicted.
//
// A recomputed segment (activation checkpointing) gathers for its
// recomputation as for a forward. Rematerialize keeps the storage's
// version, so the tensors autograd saved from a parameter before its
// eviction stay valid when it is gathered again for backward; autocast
// does not cache casts of such storage (the cache would keep the copy
// eviction frees). The root group is gathered by BeforeForward (before
// every forward, training or evaluating), evicted while the blocks run,
// gathered after them for the head and final norm; in backward it is
// reduced and evicted when backward reaches the blocks' output (after the
// head and final norm), gathered again when the blocks' backward ends
// (for layers before the blocks whose backward reads their weights) and
// reduced and evicted for good when its parameters report their
// gradients complete. So the root is gathered three times per
// micro-batch, or twice with ZeRO3Config.LookupsBeforeBlocks (what train
// sets for a GPT, whose layers before the blocks are embedding lookups
// that read no weights in backward; for GPT-2 the token embedding is the
// largest group). ReduceGradients (after the last micro-batch) reduces
// whatever a group still holds, evicts everything and hands the shard
// views their gradients; Update steps them. GatherEach makes each group
// whole in turn (a checkpoint's weights, one group on the device at a
// time), GatherAll the whole model for a moment (an exporter that reads
// the model), Evict frees what an evaluation left gathered; LoadFull
// writes each rank's shards from whole-model values; ExportFull and ImportFull are
// ZeRO's, so checkpoints are the same whatever the stage and rank count.
//
// Memory per rank (Adam, F32): 16·P/N for the shards, plus the group
// running: its parameters whole (4·B bytes for B parameters) and, in
// backward, their gradients until the group is reduced (at most 4·B; a
// block's gradients are packed and released one at a time). Measured on
// the test GPT (blocks of 12,704 parameters, P = 40,224): 398,016 B at
// N = 2 (16P/N = 321,792; bound 16P/N + 8·B = 423,424) and 249,824 B at
// N = 4 (bound 262,528); train's -plan -ranks N predicts it exactly
// (TestZero3MemoryAndPlan). A model built deferred (nn.Builder.Defer,
// tensor.Deferred: parameters without memory), or imported deferred
// (hf.Options.Defer: checked against the checkpoint at once, read from
// its memory-mapped files when flattened), is drawn group by group as
// NewZeRO3 flattens it, so no rank ever holds it whole, not even at
// start (TestZero3DeferredModel, train's TestZero3Import); train does
// both under -zero 3 except with -lora, whose checkpoints fingerprint the
// whole base. A model built whole must fit one rank once. With 8-bit Adam every parameter starts on a 2048-element block, as in ZeRO;
// under stage 3 the gaps are memory (shards and gathered groups, up to
// 2047 elements per parameter): nothing for GPT-2's matrices, more than
// the model itself for a test GPT of width 32.
//
// Overlap. NewLocal, MPI and NCCL as wrapped here are synchronous: a
// call returns when the collective is done. Async (NewAsync) wraps any
// of them with a goroutine that runs the rank's collectives in the order
// they were issued, so one can be started ahead and waited for later;
// every collective of the rank must then go through it. With
// ZeRO3Config.Prefetch (train's -zero-prefetch) ZeRO-3 records the order
// of a training pass's gathers (its trace) and, from the next pass on,
// starts the gather of the group the trace says comes next as soon as a
// group is gathered: the next block in forward, the block before in
// backward, the last block while the head runs. The prefetched storage
// is allocated when the gather starts, on the training goroutine, so the
// plan stays exact; the cost is one block's parameters more at the peak
// (measured on the test GPT: +25,408 B at N = 2, +38,112 B at N = 4 with
// checkpointing by √L segments, a
// block being 50,816 B; TestZero3Prefetch, TestZero3MemoryAndPlan). The
// trace also spares a gather with or without prefetching: a checkpointed
// block recomputed right before its backward stays whole (Kept) instead
// of being evicted and gathered again. GatherWait is the time the
// training goroutine waited for gathers; GatherTime minus GatherWait is
// what overlapped computation (train's summary reports both under
// "zero3"; BENCHMARKS.md has the figures). ReduceDuringBackward's
// reductions and ZeRO-3's reduce-scatters still run when issued.
//
// # Not done yet
//
//   - NCCL with more than one rank has not run: the machines that checked
//     it had one GPU (one-rank collectives pass on an H100, NCCL 2.28).
//   - Only ZeRO-3's gathers overlap computation (Async); the reductions
//     (ZeRO-3's reduce-scatters, ReduceDuringBackward's buckets) are
//     waited for where they are issued. With NCCL an Async overlaps
//     nothing: the collective is queued on the compute stream, behind
//     the kernels already there (a communication stream is the missing
//     piece).
//   - ZeRO-3 with bf16 weights (-weights bf16) and Adafactor are refused
//     (its flat storage is F32 and its groups are cut by element ranges);
//     stages 1 and 2 take both.
package parallel
