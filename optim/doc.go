// Package optim owns the optimizers — SGD (momentum, Nesterov, dampening,
// weight decay), Adam and AdamW, 8-bit Adam and AdamW (block-wise
// quantized moments) and Adafactor (factored second moment) — their state,
// parameter groups, learning-rate schedules and gradient clipping.
//
// An Optimizer holds parameters (leaf tensors whose Name is their dotted
// path) in groups, each with its own learning rate and weight decay:
//
//	opt, err := optim.NewAdamW(nn.Trainable(model), optim.AdamW{LR: 3e-4, WeightDecay: 0.1})
//	err = opt.SetSchedule(optim.WarmupCosine{Warmup: 100, Total: 5000, Floor: 0.1})
//	for ... {
//		loss.Backward()
//		norm, err := opt.ClipGradNorm(1)
//		err = opt.Step()
//		opt.ZeroGrad() // set-to-none: frees every gradient buffer
//	}
//
// Memory. The package owns optimizer state and nothing else. State is
// created at the first Step that finds a gradient on a parameter, so frozen
// parameters (no gradient) never get any; it is counted as
// memory.OptimizerState: Adam and AdamW keep two F32 buffers per parameter
// (8 bytes per element), Adam8bit and AdamW8bit two U8 code buffers and two
// F32 scales per 2048 elements (2 + 8/2048 bytes per element), Adafactor
// R + C floats per R×C matrix and n per vector (plus n with a first
// moment), SGD with momentum one (4 bytes), plain SGD none.
// DropState frees the state of given parameters (freezing), AddParams and
// AddGroup add parameters later (gradual unfreezing) with their own learning
// rate. Every temporary a Step or a clip makes is released before it
// returns, so afterwards the allocator holds exactly parameters, gradients
// and state. ZeroGrad releases gradients (set-to-none); ZeroGradInPlace keeps
// the buffers and zeroes them.
//
// Mixed precision. StepScaled multiplies every gradient by a factor inside
// the update (1/loss-scale) without writing the gradient buffers, and Params
// and GradsFinite let a loss scaler look for inf and NaN before it decides
// to step. Parameters of any float dtype work; state is F32 whatever the
// parameter's dtype.
//
// Checkpoints. Export returns the state as a plain Go value (State:
// hyper-parameters of each group, step counts and every buffer keyed by
// "<parameter path>.<buffer>"; 8-bit codes as the float32 numbers 0…255)
// and Import restores it, exactly, checking that every buffer belongs to a
// parameter of the optimizer with the shape and values the algorithm
// keeps for it. ElementsPer says how a buffer lies along its parameter's
// elements and ShardAlignment where a parameter's update may be cut,
// which is what lets ZeRO shard it (dist); SetRoundingOrigin makes a
// shard's piece of a BF16 parameter round with the whole one's bits.
//
// Errors. Bad hyper-parameters, schedules and checkpoint states are returned
// as errors that name the field or parameter; tensor-level failures during
// a step (out of memory while creating state, a released parameter, a
// gradient of the wrong shape) are returned as errors too, never panics.
//
// An Optimizer is not safe for concurrent use: one goroutine at a time
// (package offload hands it to the goroutine that runs the host's
// updates for the length of a step, and takes it back before the step
// ends). UpdatesInPlace says whether its updates allocate anything.
package optim
