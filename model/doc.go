// Package model is what trains on goddp's devices: layers with explicit forward and backward, the
// MLP, GPT and ResNet models, Spec (the one description of every model, from which New, the one
// factory, builds it), the loss, optimizers, learning-rate schedules, the dynamic loss scaler and
// safetensors checkpoints. The devices and what they share live in packages below it:
//
//	model/tensor  Tensor, DType, the Device interface (the seam layers call), the caching
//	              allocator and memory stats, the counter RNG, the shape rules both devices
//	              follow (GEMMShape); imports nothing of goddp
//	model/half    the f16 codec (float32 ↔ IEEE half), shared with allreduce's wire codec
//	model/cpu     the CPU device (plain Go, assembly GEMM): cpu.New()
//	model/cuda    the CUDA device, build tag cuda: cuda.New(ordinal); its cgo layer cuda/cudadrv
//
// This package imports only model/tensor (and model/half, the f16 codec, for f16 safetensors): a
// layer reaches memory through Device and nothing else.
//
// # Files
//
//	params.go        Params: one slab each for weights, gradients and the f16 copy
//	layer_*.go       the layers (below); loss.go the losses and the chunked LM head
//	mlp.go, gpt.go   the models; model.go the Model interface (with what a trainer asks of any
//	                 model: Input, TargetsPerSample, Classifier) and Inputs; release.go Releaser
//	resnet.go        ResNet 18/34/50 (issue 21): imagenet or small stem, basic or bottleneck
//	                 blocks, per-block checkpointing; buffers.go the BN running statistics' slab
//	kvcache.go       Decoder: a GPT's inference forward with a KV cache, one sequence at a time
//	sample.go        Sampler (greedy, temperature, top-k, seeded) and Decoder.Generate
//	optim.go         AdamW and SGD, ClipGradNorm (or GradNormCoef and AdamW.StepScaled: the clip
//	                 in the step, no pass of its own); schedule.go learning-rate schedules
//	scaler.go        the dynamic loss scaler
//	safetensors.go   checkpoint tensors in the safetensors format (F32, F16, BF16, I32)
//	spec.go          Spec: the one description of every model (GPT, MLP, ResNet): its whole
//	                 architecture, for checkpoints that stand alone (config.json and the
//	                 safetensors __metadata__), and how a process runs it (compute dtype,
//	                 recompute, attention path; never written down); GPTConfig.Spec and the
//	                 others, Spec.GPTConfig and the others
//	weights.go       New(dev, spec, seed), the one factory (every kind); weights in and out:
//	                 ReadWeights, Params.LoadNamed, Open
//	hf.go            GPT-2 in Hugging Face GPT2LMHeadModel's names and layout, and its config.json
//	gpt_logits.go    GPT.Logits: the (B,T,V) logits of a prompt
//
// # Shapes
//
// Dimensions are named once and used everywhere: B batch, T sequence length (≤ Context), C width,
// H heads, hs = C/H head size, V vocabulary, R "rows" (all leading dimensions of a tensor read as a
// matrix). Every function says its shapes, "x (B,T,C)", and every struct field carries its shape.
// Weights follow PyTorch: a Linear's W is (Out,In) and y = x·Wᵀ + b.
//
// # Layers
//
// Each layer file holds one concept, llm.c style: XForward next to XBackward, the backward's
// parameters listing its outputs first (dx, dw, db), then dout, then exactly the forward tensors
// it reads (x, w, mean, rstd). Nothing is taped: what a layer saves shows in its signature. The
// files: layer_linear.go, layer_activation.go (ReLU, GELU), layer_layernorm.go,
// layer_embedding.go (tokens + learned positions), layer_attention.go (causal multi-head
// self-attention), layer_residual.go, layer_dropout.go, loss.go (fused cross-entropy), and for
// convolutional networks layer_conv.go (Conv2d), layer_batchnorm.go (BatchNorm2d: batch
// statistics in training, running statistics in evaluation) and layer_pool.go (MaxPool2d,
// global average pooling). Those reach the device through the optional tensor.ConvDevice
// (model/cpu has it; a device without it is refused by NewResNet with a clear error). Images
// are NCHW: x (N,C,H,W), a convolution's weight (Out,In,KH,KW) as in PyTorch.
// Layers only call tensor.Device operations; they never index host memory, so the CUDA device
// runs them asynchronously. Parameter gradients always accumulate (gradient accumulation is free); every
// Linear, LayerNorm and Embedding calls Param.Ready once its gradients are final, which is where
// the DDP engine starts all-reducing.
//
// Activations are allocated through the device with a tag ("h.3.attn.att") as the forward makes
// them and freed by the backward as soon as it is done with them, so the device's counters show
// the real activation peak and tensor.MemorySummary names what is alive.
//
// # The training flow
//
//	dev := cpu.New()                                           // or cuda.New(0)
//	spec := GPTConfig{Layers: 4, Width: 128, Heads: 4, Context: 128, Vocab: 256, Tied: true,
//		Compute: tensor.F16, Checkpoint: 1}.Spec()             //    or a ResNetConfig's, an MLPConfig's
//	m, err := New(dev, spec, seed)                             // 1. build: params + grads (+ f16 copy)
//	opt, _ := NewAdamW(m.Params(), DefaultAdamW())             //    m, v slabs beside the params
//	sc, _ := NewScaler(dev, DefaultScaler())                   //    loss scale 65536
//	lr := WarmupCosine(6e-4, 6e-5, 100, 5000)
//	for step := int64(0); ; step++ {
//		m.Params().ZeroGrad()                                  // 2. zero grads (micro-step 0)
//		for micro := 0; micro < k; micro++ {
//			loss := m.Forward(in, true)                        // 3. forward: saves activations
//			m.Backward(sc.Scale() / float32(k))                // 4. backward: grads accumulate, Ready fires
//		}
//		flag := sc.UnscaleCheck(m.Params())                    // 5. unscale, look for inf/NaN
//		found := sc.FoundInf(flag)                             //    (DDP agrees on it across ranks)
//		if !found {
//			ClipGradNorm(m.Params(), 1)
//			opt.Step(lr(step))                                 // 6. step: f32 masters, f16 copy refreshed
//		}
//		if err := sc.Update(found); err != nil { … }          //    scale ×0.5 or ×2 after 2000 clean steps
//	}
//	m.Free(); opt.Free(); sc.Free()                            // 7. device Allocated back to the baseline
//
// # Using a trained model
//
// A checkpoint or an export says what model it holds (spec.go), so a Go program needs no run
// configuration to use it: Open(dev, dir) builds the model a goddp checkpoint, a `ddptrain export`
// or a Hugging Face GPT-2 directory holds and loads its weights; GPT.Logits runs a prompt.
// Example (example_test.go) walks through it.
//
// # Mixed precision
//
// With Compute F16, Params keeps an f16 copy of the f32 master weights (Param.Compute is what
// forward and backward read); activations and activation gradients are f16; LayerNorm statistics
// and gains, the softmax inside the loss and the loss itself are f32; parameter gradients are f32
// (the gradient slab; matmuls write f32 from f16 operands). The optimizer writes the refreshed f16
// copy in the same pass as the update; Params.SyncHalf refreshes it after loading weights.
// The Scaler multiplies the loss so small f16 gradients do not underflow, and skips a step whose
// gradients overflow.
//
// With Compute BF16 the same holds in bfloat16 (f32's exponent range, 8 significant bits): the
// layers that keep f32 under F16 keep it under BF16, and there is no loss scaling (a Scaler with
// CheckFinite: an inf or NaN gradient is an error, ErrNonFinite). The CUDA device computes in
// bf16 on compute capability 8.0 and later (tensor.CheckCompute refuses older cards).
//
// # Memory
//
// Checkpoint (Spec, and MLPConfig, GPTConfig, ResNetConfig) trades compute for memory: a checkpointed block keeps only its
// output during forward and recomputes its activations from its input in backward, producing the
// same gradients to the bit on the CPU. The GPT's backward reuses the logits buffer for dlogits,
// so Predict comes before Backward.
package model
