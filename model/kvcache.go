package model

import (
	"errors"
	"fmt"

	"github.com/goddp/goddp/model/tensor"
)

// Decoder is a GPT's inference-only forward over one sequence (B = 1) with a KV cache: every
// block's keys and values of the positions seen so far stay on the device, so a new token runs
// the blocks for its own row and attends over the cached prefix instead of recomputing it.
// Append feeds tokens; Logits is then the next token's distribution before softmax.
//
// Dims: n positions already cached, T new tokens (1 while decoding, up to maxT for the first
// chunk), L = n+T after the step, maxT = Context, H heads, hs = C/H.
//
// The cache is one slab, (Layers, 2, maxT, C) in the compute dtype: block l's keys at [l][0] and
// values at [l][1], row t holding position t's key (value) with the heads side by side (H, hs),
// as the QKV projection writes them. New rows go in with one permute per tensor (the cache rows
// of a step are contiguous), and the attention reads the prefix back per head with one permute
// into (H, L, hs) scratch: every operation is one device call for all heads, at the price of
// re-laying the L·C keys and values once per step and block, the same order of memory traffic as
// the attention's own reads. One step of block l:
//
//	ln = ln1(x)                                    (T,C)      x is the residual stream
//	q, k, v = split(ln·Wqkvᵀ + bqkv)               (H,T,hs) each
//	cache_k[n:L] = permute(k); cache_v likewise    (T,H,hs)   the new rows
//	kt, vt = permute(cache_k[0:L]), permute(...)   (H,L,hs)   the prefix, per head
//	att = softmax(q·ktᵀ/√hs)                       (H,T,L)    causal on the first chunk (n = 0, L = T)
//	y = permute(att·vt)                            (T,H,hs) = (T,C)
//	x += y·Wprojᵀ + bproj
//	x += proj(gelu(fc(ln2(x))))
//
// and after the last block logits = lnf(x[T-1])·Wheadᵀ, (1,V) f32, for the last position only.
// The device's causal softmax masks square blocks only, so a chunk of more than one token is
// computed in one step only at n = 0 (the prompt, or a slid window); later chunks go through one
// token at a time.
//
// Memory plan: NewDecoder allocates everything once through the device, for maxT rows: the cache
// slab and one scratch tensor per kind of activation, tagged "kv.…"; a step's tensors are views
// of their first rows, so Append allocates nothing (the devices' own temporaries aside). The
// scores and probabilities, (H, maxT, maxT) each, are sized for a prompt of maxT tokens.
//
// Numerics: the same layers as GPT.Forward in evaluation (no dropout), with the materialised
// attention; the logits equal a full forward's to float rounding (generate_test.go). A Decoder
// reads the model's weights as they are at each step and must not outlive the model; like the
// model it is driven by one goroutine.
type Decoder struct {
	m *GPT
	n int // positions in the cache

	cache *tensor.Tensor // (Layers, 2, maxT, C) compute dtype

	ids        *tensor.Tensor // (maxT) i32 the step's tokens
	x          *tensor.Tensor // (maxT, C) residual stream
	ln         *tensor.Tensor // (maxT, C) LayerNorm output (ln1, then ln2)
	mean, rstd *tensor.Tensor // (maxT) f32
	qkv        *tensor.Tensor // (maxT, 3C)
	q, k, v    *tensor.Tensor // (H, maxT, hs) the step's rows, per head
	kt, vt     *tensor.Tensor // (H, maxT, hs) the cached prefix, per head
	scores     *tensor.Tensor // (H, maxT, maxT) q·ktᵀ
	att        *tensor.Tensor // (H, maxT, maxT) softmax
	yh         *tensor.Tensor // (H, maxT, hs)
	y          *tensor.Tensor // (maxT, C) heads side by side
	branch     *tensor.Tensor // (maxT, C) a branch's output (attention, then MLP projection)
	fc, gelu   *tensor.Tensor // (maxT, 4C)
	lnf        *tensor.Tensor // (1, C) final LayerNorm of the last position
	logits     *tensor.Tensor // (1, V) f32
}

// ErrContextFull is Append's error when the tokens would not fit the model's context.
var ErrContextFull = errors.New("model: the KV cache is full (the sequence reached the model's Context)")

// NewDecoder allocates a decoder's cache and scratch on the model's device (see Decoder for the
// sizes); Free gives them back.
func (m *GPT) NewDecoder() *Decoder {
	dev, dt, cfg := m.dev, m.Cfg.Compute, m.Cfg
	maxT, C, H := cfg.Context, cfg.Width, cfg.Heads
	hs := C / H
	return &Decoder{
		m:      m,
		cache:  dev.Alloc(dt, "kv.cache", cfg.Layers, 2, maxT, C),
		ids:    dev.Alloc(tensor.I32, "kv.ids", maxT),
		x:      dev.Alloc(dt, "kv.x", maxT, C),
		ln:     dev.Alloc(dt, "kv.ln", maxT, C),
		mean:   dev.Alloc(tensor.F32, "kv.mean", maxT),
		rstd:   dev.Alloc(tensor.F32, "kv.rstd", maxT),
		qkv:    dev.Alloc(dt, "kv.qkv", maxT, 3*C),
		q:      dev.Alloc(dt, "kv.q", H, maxT, hs),
		k:      dev.Alloc(dt, "kv.k", H, maxT, hs),
		v:      dev.Alloc(dt, "kv.v", H, maxT, hs),
		kt:     dev.Alloc(dt, "kv.kt", H, maxT, hs),
		vt:     dev.Alloc(dt, "kv.vt", H, maxT, hs),
		scores: dev.Alloc(dt, "kv.scores", H, maxT, maxT),
		att:    dev.Alloc(dt, "kv.att", H, maxT, maxT),
		yh:     dev.Alloc(dt, "kv.yh", H, maxT, hs),
		y:      dev.Alloc(dt, "kv.y", maxT, C),
		branch: dev.Alloc(dt, "kv.branch", maxT, C),
		fc:     dev.Alloc(dt, "kv.fc", maxT, 4*C),
		gelu:   dev.Alloc(dt, "kv.gelu", maxT, 4*C),
		lnf:    dev.Alloc(dt, "kv.lnf", 1, C),
		logits: dev.Alloc(tensor.F32, "kv.logits", 1, cfg.Vocab),
	}
}

// Len is the number of positions in the cache.
func (d *Decoder) Len() int { return d.n }

// Reset empties the cache (nothing is freed or cleared: the next Append overwrites it).
func (d *Decoder) Reset() { d.n = 0 }

// Logits is the last appended position's logits, (1,V) f32 on the device, overwritten by the
// next Append.
func (d *Decoder) Logits() *tensor.Tensor { return d.logits }

// Append runs the model on tokens at positions Len() … Len()+len(tokens)-1, adding their keys and
// values to the cache, and leaves the last one's logits in Logits. Tokens that would pass the
// model's Context are refused with ErrContextFull and ids outside the vocabulary with an error;
// either way nothing is run and the cache is unchanged.
func (d *Decoder) Append(tokens []int32) error {
	cfg := d.m.Cfg
	if len(tokens) == 0 {
		return errors.New("model: Decoder.Append of no tokens")
	}
	if d.n+len(tokens) > cfg.Context {
		return fmt.Errorf("%w: %d cached + %d new > %d", ErrContextFull, d.n, len(tokens), cfg.Context)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= cfg.Vocab {
			return fmt.Errorf("model: Decoder.Append: token %d (at %d) is outside the vocabulary of %d", id, i, cfg.Vocab)
		}
	}
	if d.n == 0 {
		d.step(tokens)
		return nil
	}
	for i := range tokens { // a rectangular causal mask is not a device op: one at a time
		d.step(tokens[i : i+1])
	}
	return nil
}

// step is one forward of T = len(tokens) new positions; T > 1 only with an empty cache.
func (d *Decoder) step(tokens []int32) {
	m, dev := d.m, d.m.dev
	n, T := d.n, len(tokens)
	maxT, C, H := m.Cfg.Context, m.Cfg.Width, m.Cfg.Heads
	hs, L := C/H, n+T

	ids := d.ids.View(0, 1, T)
	dev.UploadI32(ids, tokens)
	x := d.x.View(0, T, C)
	var wpe *tensor.Tensor // rows n … n+T-1: the Embedding op adds wpe's row t to position t
	if m.Emb.WPE != nil {
		wpe = m.Emb.WPE.Compute().View(n*C, T, C)
	}
	dev.Embedding(x.Reshape(1, T, C), ids, m.Emb.WTE.Compute(), wpe)

	ln, mean, rstd := d.ln.View(0, T, C), d.mean.View(0, T), d.rstd.View(0, T)
	qkv, y, branch := d.qkv.View(0, T, 3*C), d.y.View(0, T, C), d.branch.View(0, T, C)
	q, k, v := d.q.View(0, 1, H, T, hs), d.k.View(0, 1, H, T, hs), d.v.View(0, 1, H, T, hs)
	kt, vt := d.kt.View(0, 1, H, L, hs), d.vt.View(0, 1, H, L, hs)
	scores, att, yh := d.scores.View(0, H, T, L), d.att.View(0, H, T, L), d.yh.View(0, 1, H, T, hs)
	fc, gelu := d.fc.View(0, T, 4*C), d.gelu.View(0, T, 4*C)
	for l, b := range m.Blocks {
		ck := d.cache.View((2*l)*maxT*C, maxT, C)
		cv := d.cache.View((2*l+1)*maxT*C, maxT, C)

		b.LN1.Forward(ln, mean, rstd, x)
		b.Attn.QKV.Forward(qkv, ln)
		dev.SplitQKV(q, k, v, qkv.Reshape(1, T, 3*C))
		dev.Permute0213(ck.View(n*C, 1, T, H, hs), k)
		dev.Permute0213(cv.View(n*C, 1, T, H, hs), v)
		dev.Permute0213(kt, ck.View(0, 1, L, H, hs))
		dev.Permute0213(vt, cv.View(0, 1, L, H, hs))
		dev.BatchedMatMul(scores, q.Reshape(H, T, hs), kt.Reshape(H, L, hs), false, true, 1, 0)
		dev.Softmax(att, scores, b.Attn.scale(), T > 1) // T > 1 only at n = 0: (H,T,T), square
		dev.BatchedMatMul(yh.Reshape(H, T, hs), att, vt.Reshape(H, L, hs), false, false, 1, 0)
		dev.Permute0213(y.Reshape(1, T, H, hs), yh)
		b.Attn.Proj.Forward(branch, y)
		ResidualForward(dev, x, x, branch)

		b.LN2.Forward(ln, mean, rstd, x)
		b.FC.Forward(fc, ln)
		GELUForward(dev, gelu, fc)
		b.Proj.Forward(branch, gelu)
		ResidualForward(dev, x, x, branch)
	}
	m.LnF.Forward(d.lnf, d.mean.View(0, 1), d.rstd.View(0, 1), x.View((T-1)*C, 1, C))
	dev.MatMul(d.logits, d.lnf, m.headW(), false, true, 1, 0)
	d.n = L
}

// Free gives the cache and scratch back to the device.
func (d *Decoder) Free() {
	freeAll(d.m.dev, d.cache, d.ids, d.x, d.ln, d.mean, d.rstd, d.qkv, d.q, d.k, d.v, d.kt, d.vt,
		d.scores, d.att, d.yh, d.y, d.branch, d.fc, d.gelu, d.lnf, d.logits)
	*d = Decoder{m: d.m}
}
