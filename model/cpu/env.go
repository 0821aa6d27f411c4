package cpu

import (
	"os"

	"github.com/goddp/goddp/model/tensor"
)

// The environment the CPU device reads, all of it here:
//
//	GODDP_BIAS_FOLD=0  a GPT block's bias adds as passes of their own, not folded into GELU and
//	                   the residual adds (tensor.BiasFolder; the same bits either way)
//	GODDP_BIAS_EPILOGUE=0 a GPT without model.gemm_epilogue takes no bias-only epilogues
//	                   (tensor.BiasEpiloguer; the same bits either way)
//	GODDP_RESNORM_FOLD=0 a GPT's residual sums and the layer norms that read them as passes of
//	                   their own (tensor.ResidualNormer; the same bits either way)
//	GODDP_GELU_DB_FOLD=0 a GPT block's fc bias gradient summed by a pass of its own, not with
//	                   GELU's backward (tensor.GELUBiasGrader; the same bits either way)
//	GODDP_UNSCALE_FOLD=0 the loss scaler's check unscales the gradients in place and AdamW reads
//	                   them so, not a check that reads them and AdamW unscaling each as it reads
//	                   it (tensor.UnscaleFolder; the same bits either way; folded is the default,
//	                   as on the CUDA device since session 21)
//	GODDP_LN_COLSUM=0  a GPT's residual projections sum their bias gradients themselves, not in
//	                   the layer norms' backward that writes their output gradient
//	                   (tensor.LNBackwardColSummer; the same bits either way)

// envSwitches are the variables above (each 0 or 1; unset: the default).
var envSwitches = []string{"GODDP_BIAS_FOLD", "GODDP_BIAS_EPILOGUE", "GODDP_RESNORM_FOLD", "GODDP_GELU_DB_FOLD", "GODDP_UNSCALE_FOLD", "GODDP_LN_COLSUM"}

// CheckEnv returns an error naming the first of the CPU device's switches set to something other
// than 0 or 1 (the trainer calls it at start-up: worker.EnvFromOS).
func CheckEnv() error { return tensor.CheckSwitches(os.Getenv, "cpu", envSwitches) }

// biasFold reports whether the model should fold the bias adds on the CPU device (FoldsBias):
// on unless GODDP_BIAS_FOLD=0, so the model's folded path is what the CPU tests run. Read when a
// model is built.
func biasFold() bool { return os.Getenv("GODDP_BIAS_FOLD") != "0" }

// geluDBFold reports whether the model should take GELUBackwardBiasGrad on the CPU device
// (FusesGELUBiasGrad): on unless GODDP_GELU_DB_FOLD=0, so the model's path through it is what the
// CPU tests run. Read when a model is built.
func geluDBFold() bool { return os.Getenv("GODDP_GELU_DB_FOLD") != "0" }

// biasEpilogue reports whether a GPT on the CPU device takes the bias-only epilogues
// (BiasEpilogues): on unless GODDP_BIAS_EPILOGUE=0. Read when a model is built.
func biasEpilogue() bool { return os.Getenv("GODDP_BIAS_EPILOGUE") != "0" }

// resNormFold reports whether a GPT on the CPU device takes AddBiasAddLayerNorm
// (FusesResidualNorm): on unless GODDP_RESNORM_FOLD=0. Read when a model is built.
func resNormFold() bool { return os.Getenv("GODDP_RESNORM_FOLD") != "0" }

// unscaleFold reports whether the loss scaler's unscale is left to AdamW (FoldsUnscale): unless
// GODDP_UNSCALE_FOLD=0, the CUDA device's switch. Read at each call, so a test can set it.
func unscaleFold() bool { return os.Getenv("GODDP_UNSCALE_FOLD") != "0" }

// lnColSum reports whether a GPT on the CPU device sums its residual projections' bias gradients
// in the layer norms' backward (FoldsLNColSums): on unless GODDP_LN_COLSUM=0, so the model's path
// through it is what the CPU tests run. Read when a model is built.
func lnColSum() bool { return os.Getenv("GODDP_LN_COLSUM") != "0" }
