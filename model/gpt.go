package model

import (
	"fmt"
	"math"

	"github.com/goddp/goddp/model/tensor"
)

// GPTConfig describes a decoder-only transformer over a token vocabulary.
type GPTConfig struct {
	Layers  int          // transformer blocks L
	Width   int          // channels C
	Heads   int          // attention heads H; C % H == 0, head size hs = C/H
	Context int          // longest sequence maxT (learned positions)
	Vocab   int          // V
	Tied    bool         // logits = x·wteᵀ (no separate lm_head)
	Dropout float32      // on embeddings, attention probabilities and both residual branches
	Compute tensor.DType // F32, or F16 or BF16 for mixed precision
	// Checkpoint recomputes blocks in backward: 0 none, 1 every block, N every Nth (0, N, 2N, …).
	// A checkpointed block keeps only its output (the next block's input).
	Checkpoint int
	// LossChunk is the rows of logits (of B·T) the head and loss hold at a time (loss.go:
	// LMHeadLossForward); 0 = LMHeadChunkRows: about 384 MiB of logits on a GPU, 128 MiB on the CPU. The full (B,T,V) logits
	// are never kept.
	LossChunk int
	// Attention chooses the attention path (layer_attention.go); the zero value is AttnAuto.
	Attention AttentionMode
	// CheckpointKeepAttn makes checkpointed blocks also keep their fused attention's output and
	// log-sum-exp ((B,T,C) and (B,H,T) f32, a fifth of what qkv and the block's other activations
	// take), so the recompute runs the QKV and projection GEMMs but not the attention itself.
	// Blocks on the materialised path recompute everything as before.
	CheckpointKeepAttn bool
	// GemmEpilogue makes the blocks do their linears' bias adds and bias gradients, and the MLP's
	// GELU, in the GEMMs' epilogues when the device has the ability (tensor.EpilogueDevice; the CUDA device
	// through cublasLt). Off by default: on the CUDA device the bias is added before the product
	// is rounded, so the numbers differ from the separate kernels' in the last bits; on the CPU
	// they are bit-identical (the CPU composes the same operations).
	GemmEpilogue bool
}

// GPT is GPT-2's architecture with pre-LN blocks:
//
//	x0 = dropout(wte[tokens] + wpe[t])                       (B,T,C)
//	x_{l+1} = block_l(x_l)                                    (B,T,C)
//	logits = lnf(x_L)·wteᵀ   (or lm_head when not tied)       (B,T,V), chunk by chunk
//	loss = mean cross-entropy over targets ≥ 0                (1) f32
//
// Memory plan: a training forward keeps every block's activations (a checkpointed block only its
// output) and lnf(x_L); the logits exist one chunk of LossChunk rows at a time, in forward and
// again in backward, which recomputes them (loss.go). Nothing of size V·B·T is ever held.
//
// Dims: B batch, T sequence (≤ Context), C width, H heads, hs = C/H, V vocabulary.
type GPT struct {
	Cfg    GPTConfig
	Emb    *Embedding // wte (V,C), wpe (Context,C)
	Blocks []*Block
	LnF    *LayerNorm
	Head   *Linear // (V,C) lm_head, nil when tied
	dev    tensor.Device
	ps     *Params
	seed   uint64
	colSum tensor.LNBackwardColSummer // lnf's backward sums the last MLP projection's bias gradient (lnColSummer)

	// state of the last forward
	loss  *tensor.Tensor // (1) f32
	x0    *tensor.Tensor // (B,T,C) embedding output (block 0's input)
	acts  []*BlockActs   // per block (training forward)
	lnf   *tensor.Tensor // (B,T,C) final LayerNorm output, lm_head input; kept for Predict
	meanf *tensor.Tensor // (B,T) f32
	rstdf *tensor.Tensor // (B,T) f32
	in    Inputs
	count int
	train bool
	dlnf  *tensor.Tensor // (B,T,C) the head's input gradient when the forward ran the head's backward
}

// Block is one pre-LN transformer block:
//
//	r = x + dropout(attn(ln1(x)))
//	out = r + dropout(proj(gelu(fc(ln2(r)))))
type Block struct {
	LN1  *LayerNorm
	Attn *Attention
	LN2  *LayerNorm
	FC   *Linear // (4C,C)
	Proj *Linear // (C,4C)
	P    float32 // residual dropout
	Tag  string  // "h.l"
	Ckpt bool    // recompute in backward
	// Epilogue, when not nil, does the MLP's bias adds, GELU and bias gradients in its GEMMs'
	// epilogues (GPTConfig.GemmEpilogue on a device with the ability: epilogueOf).
	Epilogue tensor.EpilogueDevice
	// KeepAttn (with Ckpt): keep the fused attention's y and lse through the checkpoint.
	KeepAttn bool
	// Fold, when not nil, folds the bias adds into the passes that read their results: the fc's
	// into GELU, the projections' into the residual adds (without residual dropout only):
	// tensor.BiasFolder, the same bits (the device's FoldsBias at construction: foldsBias).
	Fold tensor.BiasFolder
	// GradFold, when not nil, sums the fc's bias gradient in GELU's backward pass
	// (tensor.GELUBiasGrader, the same bits; the device's FusesGELUBiasGrad at construction:
	// geluBiasGrader).
	GradFold tensor.GELUBiasGrader
	// ResNorm, when not nil (with Fold), makes each residual sum with the layer norm that reads it
	// in one pass: r with ln2, and out with the next block's ln1 (or the final lnf)
	// (tensor.ResidualNormer, the same bits; the device's FusesResidualNorm at construction).
	ResNorm tensor.ResidualNormer
	// ColSum, when not nil, sums the residual projections' bias gradients in the backward of the
	// layer norms that write their output gradient (tensor.LNBackwardColSummer; the device's
	// FoldsLNColSums at construction, without residual dropout or model.gemm_epilogue:
	// lnColSummer): ln2's for the attention's projection, the block above's ln1 (or lnf) for the
	// MLP's; both projections then take their weight gradients alone (Linear.BiasSummed).
	ColSum tensor.LNBackwardColSummer
	// Below is the block under this one (nil for the first) when ColSum is set: ln1's backward
	// writes its output gradient, so sums its MLP projection's bias gradient.
	Below *Block
	// dropout sites
	siteAtt, siteRes1, siteRes2 string
}

// BlockActs is what Block.Backward needs from the forward. X belongs to the caller (the previous
// block's Out or the embedding); everything else, Out included, is the block's own and freed by
// Backward. A checkpointed block keeps only Out and recomputes the rest.
type BlockActs struct {
	X            *tensor.Tensor // (B,T,C) input, not owned
	LN1          *tensor.Tensor // (B,T,C)
	Mean1, Rstd1 *tensor.Tensor // (B,T) f32
	Attn         *AttentionActs
	Res1         *tensor.Tensor // (B,T,C) x + attention branch
	LN2          *tensor.Tensor // (B,T,C)
	Mean2, Rstd2 *tensor.Tensor // (B,T) f32
	FC           *tensor.Tensor // (B,T,4C) before GELU
	Gelu         *tensor.Tensor // (B,T,4C)
	Out          *tensor.Tensor // (B,T,C) block output
	P            float32        // dropout used (the block's P in training, 0 in evaluation)
	Seed         uint64         // this forward's dropout seed
	// next: the layer norm after the block (the next block's ln1, or lnf) made with Out's sum
	// (ResNorm), for the caller to take (takeNext); nil otherwise.
	next *lnOut
}

// lnOut is a LayerNorm's forward outputs: y (B,T,C), mean and rstd (B,T) f32.
type lnOut struct{ y, mean, rstd *tensor.Tensor }

// newLNOut allocates a LayerNorm's outputs for x (B,T,C) under tag.
func newLNOut(dev tensor.Device, dt tensor.DType, tag string, B, T, C int) *lnOut {
	return &lnOut{y: dev.Alloc(dt, tag, B, T, C), mean: dev.Alloc(tensor.F32, tag+".mean", B, T), rstd: dev.Alloc(tensor.F32, tag+".rstd", B, T)}
}

// takeNext hands the layer norm made after the block over to the caller.
func (a *BlockActs) takeNext() *lnOut {
	n := a.next
	a.next = nil
	return n
}

// NewBlock registers block name's parameters in forward order.
func NewBlock(ps *Params, name string, c, heads int, std, projStd, p float32) *Block {
	b := &Block{Tag: name, P: p}
	b.LN1 = NewLayerNorm(ps, name+".ln1", c)
	b.Attn = NewAttention(ps, name+".attn", c, heads, std, projStd, p)
	b.LN2 = NewLayerNorm(ps, name+".ln2", c)
	b.FC = NewLinear(ps, name+".mlp.fc", c, 4*c, std, true)
	b.Proj = NewLinear(ps, name+".mlp.proj", 4*c, c, projStd, true)
	b.siteAtt, b.siteRes1, b.siteRes2 = name+".attn.att", name+".attn.resid", name+".mlp.resid"
	return b
}

// Forward runs the block on x (B,T,C); activations take x's dtype. Dropout (only with train)
// draws its masks from seed.
func (b *Block) Forward(x *tensor.Tensor, seed uint64, train bool) *BlockActs {
	return b.forward(x, seed, train, true, nil, nil, nil, "")
}

// forward is Forward; without out it stops after the MLP's GELU, which is all a checkpointed
// block's recompute needs (backward reads the projection's input, never its output), so the
// recompute skips the MLP projection GEMM, its dropout and the residual add. kept, when not nil,
// is the fused attention's output kept through a checkpoint (KeepAttn): the attention is not rerun.
// pre, when not nil, is ln1(x) made by the block before (its ResNorm): the block's own. next, when
// not nil, is the layer norm after the block (tag its outputs' tag): with ResNorm the block makes
// it with Out's sum, into a.next.
func (b *Block) forward(x *tensor.Tensor, seed uint64, train, out bool, kept *AttentionActs, pre *lnOut, next *LayerNorm, nextTag string) *BlockActs {
	dev, dt := x.Device(), x.DType()
	B, T, C := x.Dim(0), x.Dim(1), x.Dim(2)
	a := &BlockActs{X: x, Seed: seed}
	if train {
		a.P = b.P
	}

	if pre == nil {
		pre = newLNOut(dev, dt, b.Tag+".ln1", B, T, C)
		b.LN1.Forward(pre.y, pre.mean, pre.rstd, x)
	}
	a.LN1, a.Mean1, a.Rstd1 = pre.y, pre.mean, pre.rstd
	// fold: the bias adds in the passes that read their results (tensor.BiasFolder): the
	// projections' into the residual adds (only without residual dropout between them), the fc's
	// into GELU. The same bits as the separate passes.
	fold := b.Fold
	foldRes := fold != nil && a.P == 0
	att := dev.Alloc(dt, b.Tag+".attn.out", B, T, C)
	if kept != nil {
		a.Attn = b.Attn.forwardKept(att, a.LN1, kept, !foldRes)
	} else {
		a.Attn = b.Attn.forward(att, a.LN1, a.P, tensor.DeriveSeed(seed, b.siteAtt), !foldRes)
	}
	a.Res1 = dev.Alloc(dt, b.Tag+".res1", B, T, C)
	var ln2 *lnOut
	switch {
	case foldRes && b.ResNorm != nil: // Res1 = x + (att + b), and ln2(Res1) with it
		ln2 = newLNOut(dev, dt, b.Tag+".ln2", B, T, C)
		b.ResNorm.AddBiasAddLayerNorm(a.Res1, ln2.y, ln2.mean, ln2.rstd, x, att, b.Attn.Proj.bias(), b.LN2.W.Master(), b.LN2.B.Master(), LayerNormEps)
	case foldRes: // Res1 = x + (att + b)
		fold.AddBiasAdd(a.Res1, x, att, b.Attn.Proj.bias())
	default:
		att = dropoutNew(att, a.P, tensor.DeriveSeed(seed, b.siteRes1))
		ResidualForward(dev, a.Res1, x, att)
	}
	dev.Free(att)

	if ln2 == nil {
		ln2 = newLNOut(dev, dt, b.Tag+".ln2", B, T, C)
		b.LN2.Forward(ln2.y, ln2.mean, ln2.rstd, a.Res1)
	}
	a.LN2, a.Mean2, a.Rstd2 = ln2.y, ln2.mean, ln2.rstd
	a.FC = dev.Alloc(dt, b.Tag+".mlp.fc", B, T, 4*C)
	a.Gelu = dev.Alloc(dt, b.Tag+".mlp.gelu", B, T, 4*C)
	switch {
	case b.Epilogue != nil: // a.FC is the pre-GELU activation the GEMM keeps as aux
		b.Epilogue.LinearBiasGELU(a.Gelu, a.FC, a.LN2, b.FC.W.Compute(), b.FC.bias())
	case fold != nil:
		b.FC.product(a.FC, a.LN2)
		fold.AddBiasGELU(a.FC, a.Gelu, b.FC.bias())
	default:
		b.FC.Forward(a.FC, a.LN2)
		GELUForward(dev, a.Gelu, a.FC)
	}
	if !out {
		return a
	}
	mlp := dev.Alloc(dt, b.Tag+".mlp.out", B, T, C)
	switch {
	case b.Epilogue != nil:
		b.Epilogue.LinearBias(mlp, a.Gelu, b.Proj.W.Compute(), b.Proj.bias())
	case foldRes: // Out = Res1 + (mlp + b), and the next layer norm with it (ResNorm)
		b.Proj.product(mlp, a.Gelu)
		a.Out = dev.Alloc(dt, b.Tag+".out", B, T, C)
		if b.ResNorm != nil && next != nil {
			a.next = newLNOut(dev, dt, nextTag, B, T, C)
			b.ResNorm.AddBiasAddLayerNorm(a.Out, a.next.y, a.next.mean, a.next.rstd, a.Res1, mlp, b.Proj.bias(), next.W.Master(), next.B.Master(), LayerNormEps)
		} else {
			fold.AddBiasAdd(a.Out, a.Res1, mlp, b.Proj.bias())
		}
		dev.Free(mlp)
		return a
	default:
		b.Proj.Forward(mlp, a.Gelu)
	}
	mlp = dropoutNew(mlp, a.P, tensor.DeriveSeed(seed, b.siteRes2))
	a.Out = dev.Alloc(dt, b.Tag+".out", B, T, C)
	ResidualForward(dev, a.Out, a.Res1, mlp)
	dev.Free(mlp)
	return a
}

// foldsBias is dev's tensor.BiasFolder when the block may fold its bias adds (Block.Fold): the
// device asks for it (FoldsBias), the linears have biases, and no GEMM epilogue adds them
// instead; else nil.
func (b *Block) foldsBias(dev tensor.Device) tensor.BiasFolder {
	f, ok := dev.(tensor.BiasFolder)
	if !ok || !f.FoldsBias() || b.Epilogue != nil || b.Attn.Proj.Epilogue != nil ||
		b.FC.B == nil || b.Proj.B == nil || b.Attn.Proj.B == nil {
		return nil
	}
	return f
}

// geluBiasGrader is dev's tensor.GELUBiasGrader when the block may sum the fc's bias gradient in
// GELU's backward (Block.GradFold): the device asks for it (FusesGELUBiasGrad), the fc has a bias,
// and no GEMM epilogue computes it instead; else nil.
func (b *Block) geluBiasGrader(dev tensor.Device) tensor.GELUBiasGrader {
	g, ok := dev.(tensor.GELUBiasGrader)
	if !ok || !g.FusesGELUBiasGrad() || b.Epilogue != nil || b.FC.B == nil {
		return nil
	}
	return g
}

// biasEpilogues gives the block's linears the bias-only epilogues where dev asks for them
// (tensor.BiasEpiloguer) and no fold does their work: the QKV's bias add and bias gradient
// (Epilogue), the projections' bias gradients (GradEpilogue: their forward bias is folded into
// the residual adds, or added by its own pass), and the fc's unless GELU's backward sums it
// (GradFold). Called without model.gemm_epilogue.
func (b *Block) biasEpilogues(dev tensor.Device) {
	be, ok := dev.(tensor.BiasEpiloguer)
	ed, ok2 := dev.(tensor.EpilogueDevice)
	if !ok || !ok2 || !be.BiasEpilogues() {
		return
	}
	b.Attn.QKV.Epilogue = ed
	b.Attn.Proj.GradEpilogue, b.Proj.GradEpilogue = ed, ed
	if b.GradFold == nil {
		b.FC.GradEpilogue = ed
	}
}

// epilogueOf is dev's fused-epilogue ability when use asks for it and dev has it, else nil (the
// separate kernels).
func epilogueOf(dev tensor.Device, use bool) tensor.EpilogueDevice {
	if !use {
		return nil
	}
	ed, _ := dev.(tensor.EpilogueDevice)
	return ed
}

// dropoutNew returns dropout(t) in a new tensor, freeing t (t itself when p is 0).
func dropoutNew(t *tensor.Tensor, p float32, seed uint64) *tensor.Tensor {
	if p == 0 {
		return t
	}
	dev := t.Device()
	d := dev.Alloc(t.DType(), t.Tag()+".drop", t.Shape()...)
	DropoutForward(dev, d, t, p, seed)
	dev.Free(t)
	return d
}

// dropoutGradNew returns the gradient before dropout: dy itself when p is 0, else a new tensor.
func dropoutGradNew(dy *tensor.Tensor, p float32, seed uint64, tag string) *tensor.Tensor {
	if p == 0 {
		return dy
	}
	dev := dy.Device()
	d := dev.Alloc(dy.DType(), tag, dy.Shape()...)
	DropoutBackward(dev, d, dy, p, seed)
	return d
}

// Backward turns dres (B,T,C) from the gradient of the block's output into that of its input,
// in place, accumulating parameter gradients (each Ready as it completes) and freeing a.
func (b *Block) Backward(dres *tensor.Tensor, a *BlockActs) {
	dev, dt := dres.Device(), dres.DType()
	B, T, C := dres.Dim(0), dres.Dim(1), dres.Dim(2)
	if b.Ckpt { // recompute everything backward reads; the output is not among it
		out := a.Out
		*a = *b.forward(a.X, a.Seed, true, false, a.Attn, nil, nil, "")
		a.Out = out // freed with the rest below
	}

	// out = res1 + dropout(proj(gelu(fc(ln2(res1))))): the skip path leaves dres as it is.
	dm := dropoutGradNew(dres, a.P, tensor.DeriveSeed(a.Seed, b.siteRes2), b.Tag+".mlp.ddrop")
	dg := dev.Alloc(dt, b.Tag+".mlp.dgelu", B, T, 4*C)
	var dln2 *tensor.Tensor
	if ed := b.Epilogue; ed != nil {
		// dg = GELU'(fc)⊙(dm·Wproj) with fc's bias gradient in that GEMM's epilogue; the
		// projection's weight GEMM sums its bias gradient in its own. Ready in the unfused order.
		ed.LinearGradDGELU(dg, b.FC.B.G, dm, b.Proj.W.Compute(), a.FC)
		ed.LinearGradWB(b.Proj.W.G, b.Proj.B.G, dm, a.Gelu)
		b.Proj.B.Ready()
		b.Proj.W.Ready()
		if dm != dres {
			dev.Free(dm)
		}
		dln2 = dev.Alloc(dt, b.Tag+".dln2", B, T, C)
		LinearBackward(dev, dln2, b.FC.W.G, nil, dg, a.LN2, b.FC.W.Compute())
		b.FC.B.Ready()
		b.FC.W.Ready()
	} else {
		b.Proj.Backward(dg, dm, a.Gelu)
		if dm != dres {
			dev.Free(dm)
		}
		dln2 = dev.Alloc(dt, b.Tag+".dln2", B, T, C)
		if gf := b.GradFold; gf != nil { // fc's bias gradient summed as GELU's backward writes dg
			gf.GELUBackwardBiasGrad(dg, dg, a.FC, b.FC.B.G)
			b.FC.backwardNoBias(dln2, dg, a.LN2)
		} else {
			GELUBackward(dev, dg, dg, a.FC)
			b.FC.Backward(dln2, dg, a.LN2)
		}
	}
	dev.Free(dg)
	var sum2, sum1 *tensor.Tensor // where ln2's and ln1's backward add dres's column sums (ColSum)
	if b.ColSum != nil {
		sum2 = b.Attn.Proj.B.G
		if b.Below != nil {
			sum1 = b.Below.Proj.B.G
		}
	}
	b.LN2.backwardColSum(dres, dln2, a.Res1, a.Mean2, a.Rstd2, sum2, b.ColSum) // dres += LN2's input gradient
	dev.Free(dln2)
	freeAll(dev, a.Gelu, a.FC, a.LN2, a.Mean2, a.Rstd2, a.Res1, a.Out)

	// res1 = x + dropout(attn(ln1(x)))
	da := dropoutGradNew(dres, a.P, tensor.DeriveSeed(a.Seed, b.siteRes1), b.Tag+".attn.ddrop")
	dln1 := dev.Alloc(dt, b.Tag+".dln1", B, T, C)
	b.Attn.Backward(dln1, da, a.LN1, a.Attn)
	if da != dres {
		dev.Free(da)
	}
	b.LN1.backwardColSum(dres, dln1, a.X, a.Mean1, a.Rstd1, sum1, b.ColSum)
	dev.Free(dln1)
	freeAll(dev, a.LN1, a.Mean1, a.Rstd1)
	*a = BlockActs{}
}

// lnColSummer gives the blocks the residual projections' bias gradients summed in the layer
// norms' backward (Block.ColSum, Below, Linear.BiasSummed) where the device asks for it
// (tensor.LNBackwardColSummer's FoldsLNColSums), there is no residual dropout (the projections'
// output gradient is then dres itself) and no block takes model.gemm_epilogue; it returns the
// summer for lnf's backward, nil where not taken.
func lnColSummer(dev tensor.Device, dropout float32, blocks []*Block) tensor.LNBackwardColSummer {
	cs, ok := dev.(tensor.LNBackwardColSummer)
	if !ok || !cs.FoldsLNColSums() || dropout > 0 {
		return nil
	}
	for _, b := range blocks {
		if b.Epilogue != nil || b.Proj.B == nil || b.Attn.Proj.B == nil {
			return nil
		}
	}
	for l, b := range blocks {
		b.ColSum = cs
		b.Proj.BiasSummed, b.Attn.Proj.BiasSummed = true, true
		if l > 0 {
			b.Below = blocks[l-1]
		}
	}
	return cs
}

// keepOnlyOut frees all but the output (a checkpointed block after its forward), and with keepAttn
// the fused attention's y and lse (Attn then holds only those).
func (a *BlockActs) keepOnlyOut(dev tensor.Device, keepAttn bool) {
	var kept *AttentionActs
	if keepAttn && a.Attn.QKV != nil {
		kept = &AttentionActs{Y: a.Attn.Y, LSE: a.Attn.LSE, P: a.Attn.P, Seed: a.Attn.Seed}
		dev.Free(a.Attn.QKV)
	} else {
		a.Attn.Free(dev)
	}
	freeAll(dev, a.LN1, a.Mean1, a.Rstd1, a.Res1, a.LN2, a.Mean2, a.Rstd2, a.FC, a.Gelu)
	*a = BlockActs{X: a.X, Out: a.Out, P: a.P, Seed: a.Seed, Attn: kept}
}

// NewGPT builds and initialises a GPT with GPT-2's init: N(0, 0.02²) for matrices and embeddings,
// N(0, (0.02/√(2L))²) for the two residual projections, LayerNorm gains 1, biases 0.
func NewGPT(dev tensor.Device, cfg GPTConfig, seed uint64) (*GPT, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", cfg.Layers}, {"Width", cfg.Width}, {"Heads", cfg.Heads}, {"Context", cfg.Context}, {"Vocab", cfg.Vocab}} {
		if f.v <= 0 {
			return nil, fmt.Errorf("model: GPTConfig.%s = %d: must be positive", f.name, f.v)
		}
	}
	if cfg.Width%cfg.Heads != 0 {
		return nil, fmt.Errorf("model: GPTConfig.Heads = %d does not divide Width = %d", cfg.Heads, cfg.Width)
	}
	if err := checkCommon(dev, "GPTConfig", cfg.Dropout, cfg.Compute, cfg.Checkpoint); err != nil {
		return nil, err
	}
	if cfg.Attention == AttnFlash && cfg.Dropout > 0 {
		return nil, fmt.Errorf("model: GPTConfig.Attention = flash has no attention dropout, but Dropout = %v", cfg.Dropout)
	}
	if cfg.Attention < AttnAuto || cfg.Attention > AttnMaterialized {
		return nil, fmt.Errorf("model: GPTConfig.Attention = %d: unknown mode", cfg.Attention)
	}
	if cfg.LossChunk < 0 {
		return nil, fmt.Errorf("model: GPTConfig.LossChunk = %d: want rows > 0, or 0 for the default", cfg.LossChunk)
	}
	if cfg.LossChunk == 0 {
		cfg.LossChunk = LMHeadChunkRows(dev, cfg.Vocab, cfg.Compute)
	}
	const std = 0.02
	projStd := float32(std / math.Sqrt(2*float64(cfg.Layers)))
	m := &GPT{Cfg: cfg, dev: dev, ps: NewParams(dev), seed: seed}
	C := cfg.Width
	m.Emb = NewEmbedding(m.ps, cfg.Vocab, cfg.Context, C, std)
	for l := 0; l < cfg.Layers; l++ {
		b := NewBlock(m.ps, fmt.Sprintf("h.%d", l), C, cfg.Heads, std, projStd, cfg.Dropout)
		b.Ckpt = checkpointed(cfg.Checkpoint, l)
		b.Attn.Mode = cfg.Attention
		b.KeepAttn = cfg.CheckpointKeepAttn
		b.Epilogue = epilogueOf(dev, cfg.GemmEpilogue)
		b.Attn.QKV.Epilogue, b.Attn.Proj.Epilogue = b.Epilogue, b.Epilogue
		b.Fold = b.foldsBias(dev)
		b.GradFold = b.geluBiasGrader(dev)
		if rn, ok := dev.(tensor.ResidualNormer); ok && rn.FusesResidualNorm() && b.Fold != nil {
			b.ResNorm = rn
		}
		if b.Epilogue == nil {
			b.biasEpilogues(dev)
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.colSum = lnColSummer(dev, cfg.Dropout, m.Blocks)
	m.LnF = NewLayerNorm(m.ps, "lnf", C)
	if !cfg.Tied {
		m.Head = NewLinear(m.ps, "lm_head", C, cfg.Vocab, std, false)
	}
	m.ps.Build(cfg.Compute)
	m.ps.Init(seed)
	m.loss = dev.Alloc(tensor.F32, "loss", 1)
	dev.Fill(m.loss, 0)
	return m, nil
}

func (m *GPT) Params() *Params { return m.ps }

// Forward: Tokens (B,T) i32 and Targets (B,T) i32 → mean loss (1) f32.
func (m *GPT) Forward(in Inputs, train bool) *tensor.Tensor {
	dev, dt := m.dev, m.Cfg.Compute
	m.Release()
	if in.Tokens == nil || in.Targets == nil {
		panic("model: GPT.Forward needs Inputs.Tokens and Inputs.Targets")
	}
	B, T, C := in.Tokens.Dim(0), in.Tokens.Dim(1), m.Cfg.Width
	if T > m.Cfg.Context {
		panic(fmt.Sprintf("model: GPT.Forward: sequence of %d tokens is longer than Context = %d", T, m.Cfg.Context))
	}
	m.in, m.train = in, train
	m.count = in.Valid
	if m.count <= 0 {
		m.count = CountTargets(in.Targets)
	}
	seed := tensor.Mix64(m.seed ^ tensor.Mix64(in.Seed))

	emb := dev.Alloc(dt, "emb", B, T, C)
	m.Emb.Forward(emb, in.Tokens)
	if p := m.Cfg.Dropout; p > 0 && train {
		m.x0 = dev.Alloc(dt, "emb.drop", B, T, C)
		DropoutForward(dev, m.x0, emb, p, tensor.DeriveSeed(seed, "emb"))
		dev.Free(emb)
	} else {
		m.x0 = emb
	}

	x := m.x0
	var pre *lnOut // the next block's ln1 (or lnf), made with the last block's output (ResNorm)
	for l, b := range m.Blocks {
		next, nextTag := m.LnF, "lnf"
		if l+1 < len(m.Blocks) {
			next, nextTag = m.Blocks[l+1].LN1, m.Blocks[l+1].Tag+".ln1"
		}
		a := b.forward(x, seed, train, true, nil, pre, next, nextTag)
		pre = a.takeNext()
		switch {
		case !train: // evaluation: only the residual stream moves on
			a.keepOnlyOut(dev, false)
			if l == 0 {
				dev.Free(m.x0)
				m.x0 = nil
			} else {
				dev.Free(x)
			}
		case b.Ckpt:
			a.keepOnlyOut(dev, b.KeepAttn)
		}
		if train {
			m.acts = append(m.acts, a)
		}
		x = a.Out
	}

	if pre == nil {
		pre = newLNOut(dev, dt, "lnf", B, T, C)
		m.LnF.Forward(pre.y, pre.mean, pre.rstd, x)
	}
	m.lnf, m.meanf, m.rstdf = pre.y, pre.mean, pre.rstd
	if !train { // lnf stays for Predict
		freeAll(dev, x, m.meanf, m.rstdf)
		m.meanf, m.rstdf = nil, nil
	}
	losses := dev.Alloc(tensor.F32, "losses", B*T)
	if train && in.GradScale != 0 { // the head's backward now, while each logits chunk is at hand
		m.dlnf = dev.Alloc(dt, "dlnf", B, T, C)
		LMHeadLossForwardBackward(dev, m.loss, losses, m.dlnf, m.headGrad(), m.lnf, m.headW(), in.Targets,
			in.GradScale, m.count, m.Cfg.LossChunk)
	} else {
		LMHeadLossForward(dev, m.loss, losses, m.lnf, m.headW(), in.Targets, m.count, m.Cfg.LossChunk)
	}
	dev.Free(losses)
	return m.loss
}

// headGrad is the output projection's f32 gradient: lm_head's, or wte's when tied.
func (m *GPT) headGrad() *tensor.Tensor {
	if m.Head != nil {
		return m.Head.W.G
	}
	return m.Emb.WTE.G
}

// headW is the output projection (V,C) in the compute dtype: lm_head, or wte when tied.
func (m *GPT) headW() *tensor.Tensor {
	if m.Head != nil {
		return m.Head.W.Compute()
	}
	return m.Emb.WTE.Compute()
}

// Backward: gradients of scale·loss. The head's logits are recomputed chunk by chunk, unless the
// forward already ran the head's backward (Inputs.GradScale); Predict must come before Backward,
// which frees lnf; checkpointed blocks are recomputed from their inputs.
func (m *GPT) Backward(scale float32) {
	if !m.train {
		panic("model: GPT.Backward without a training Forward")
	}
	dev, dt := m.dev, m.Cfg.Compute
	B, T, C := m.in.Tokens.Dim(0), m.in.Tokens.Dim(1), m.Cfg.Width

	dlnf := m.dlnf
	if dlnf != nil { // the forward ran the head's backward with Inputs.GradScale
		if scale != m.in.GradScale {
			panic(fmt.Sprintf("model: GPT.Backward(%v) after a Forward that computed the head's gradient with Inputs.GradScale %v", scale, m.in.GradScale))
		}
		m.dlnf = nil
	} else {
		dlnf = dev.Alloc(dt, "dlnf", B, T, C)
		LMHeadLossBackward(dev, dlnf, m.headGrad(), m.lnf, m.headW(), m.in.Targets, scale, m.count, m.Cfg.LossChunk)
	}
	if m.Head != nil { // tied: wte's gradient completes in the embedding's backward, which fires Ready
		m.Head.W.Ready()
	}
	dev.Free(m.lnf)

	dres := dev.Alloc(dt, "dresid", B, T, C) // gradient of the residual stream, block by block
	dev.Fill(dres, 0)
	xL := m.x0
	if n := len(m.acts); n > 0 {
		xL = m.acts[n-1].Out
	}
	var sumF *tensor.Tensor // the last block's MLP projection's bias gradient (ColSum)
	if m.colSum != nil && len(m.Blocks) > 0 {
		sumF = m.Blocks[len(m.Blocks)-1].Proj.B.G
	}
	m.LnF.backwardColSum(dres, dlnf, xL, m.meanf, m.rstdf, sumF, m.colSum)
	freeAll(dev, dlnf, m.meanf, m.rstdf)
	m.lnf, m.meanf, m.rstdf = nil, nil, nil

	for l := len(m.Blocks) - 1; l >= 0; l-- {
		m.Blocks[l].Backward(dres, m.acts[l])
	}
	m.acts = m.acts[:0]

	demb := dres
	if p := m.Cfg.Dropout; p > 0 {
		demb = dev.Alloc(dt, "demb", B, T, C)
		DropoutBackward(dev, demb, dres, p, tensor.DeriveSeed(tensor.Mix64(m.seed^tensor.Mix64(m.in.Seed)), "emb"))
		dev.Free(dres)
	}
	m.Emb.Backward(demb, m.in.Tokens)
	freeAll(dev, demb, m.x0)
	m.x0 = nil
	m.train = false
}

// Predict: out (B·T) i32 = argmax of the last Forward's logits, recomputed chunk by chunk from
// lnf. Backward frees lnf, so call it between Forward and Backward (or after an evaluation Forward).
func (m *GPT) Predict(out *tensor.Tensor) {
	if m.lnf == nil {
		panic("model: GPT.Predict needs a Forward not yet followed by Backward")
	}
	LMHeadArgMax(m.dev, out, m.lnf, m.headW(), m.Cfg.LossChunk)
}

// Release frees what the previous forward (and an interrupted backward) kept: see Releaser.
// Forward starts with it, Free ends with it.
func (m *GPT) Release() {
	dev := m.dev
	for _, a := range m.acts {
		if a.Attn != nil {
			s := a.Attn
			freeLive(dev, s.Q, s.K, s.V, s.Att, s.Y, s.QKV, s.LSE)
		}
		freeLive(dev, a.LN1, a.Mean1, a.Rstd1, a.Res1, a.LN2, a.Mean2, a.Rstd2, a.FC, a.Gelu, a.Out)
	}
	m.acts = m.acts[:0]
	freeLive(dev, m.x0, m.lnf, m.meanf, m.rstdf, m.dlnf)
	m.x0, m.lnf, m.meanf, m.rstdf, m.dlnf = nil, nil, nil, nil, nil
	m.train = false
}

// Free releases every buffer and the parameters.
func (m *GPT) Free() {
	m.Release()
	freeAll(m.dev, m.loss)
	m.loss = nil
	m.ps.Free()
}
