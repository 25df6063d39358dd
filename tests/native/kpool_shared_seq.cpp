// The shared-sequence reserve test of llama.cpp b11412 (#29958, tests/test-recurrent-state-rollback.cpp:
// test_shared_seq_reserve), as a standalone program over the public C API, so Headroom's tests can run it
// against the engine they built (tests/integration/test_kpool_patches.py compiles it with the engine's
// headers and libllama).
//
// Decode a prompt into seq 0, share its cells with seq 1 (llama_memory_seq_cp, as llama-batched-bench -pps
// and llama-server's n_cmpl do), then keep decoding both sequences one token each per step, checking every
// logit is finite. Run it under GGML_SCHED_DEBUG_REALLOC=1 with two scheduler backends (--rpc puts every
// layer on a ggml-rpc-server device, --gpu on a GPU build's own device): an engine whose decode graph
// differs from the reserved one aborts.
//
//   kpool_shared_seq MODEL [--rpc HOST:PORT | --gpu] [--n-prompt N] [--n-continue N] [--ctx N] [--batch N]
//                    [--ubatch N] [--threads N]
//
// Prints "step <i> pos <p>" every 32 steps and, when every step decoded, "shared-seq decode ok: ...".
// Exit status 0 on success, 1 on a failed decode or a non-finite logit, 2 on bad arguments or set-up.

#include "llama.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct options {
    std::string model;
    std::string rpc;
    bool gpu       = false;  // --gpu: every layer on the build's own device (CUDA0 on a CUDA build)
    int n_prompt   = 128;
    int n_continue = 400;
    int n_ctx      = 4096;
    int n_batch    = 256;
    int n_ubatch   = 64;
    int n_threads  = 2;
};

bool parse(int argc, char ** argv, options & o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next_int = [&](int & dst) {
            if (i + 1 >= argc) {
                return false;
            }
            dst = std::atoi(argv[++i]);
            return dst > 0;
        };
        bool ok = true;
        if (a == "--rpc" && i + 1 < argc) {
            o.rpc = argv[++i];
        } else if (a == "--gpu") {
            o.gpu = true;
        } else if (a == "--n-prompt") {
            ok = next_int(o.n_prompt);
        } else if (a == "--n-continue") {
            ok = next_int(o.n_continue);
        } else if (a == "--ctx") {
            ok = next_int(o.n_ctx);
        } else if (a == "--batch") {
            ok = next_int(o.n_batch);
        } else if (a == "--ubatch") {
            ok = next_int(o.n_ubatch);
        } else if (a == "--threads") {
            ok = next_int(o.n_threads);
        } else if (o.model.empty() && a[0] != '-') {
            o.model = a;
        } else {
            ok = false;
        }
        if (!ok) {
            std::fprintf(stderr, "bad argument: %s\n", a.c_str());
            return false;
        }
    }
    return !o.model.empty();
}

// common/arg.cpp add_rpc_devices: the RPC backend registers one device per server
bool add_rpc(const std::string & endpoint) {
    ggml_backend_reg_t rpc_reg = ggml_backend_reg_by_name("RPC");
    if (rpc_reg == nullptr) {
        std::fprintf(stderr, "this build has no RPC backend\n");
        return false;
    }
    typedef ggml_backend_reg_t (*add_server_t)(const char * endpoint);
    auto add_server = (add_server_t) ggml_backend_reg_get_proc_address(rpc_reg, "ggml_backend_rpc_add_server");
    if (add_server == nullptr) {
        std::fprintf(stderr, "the RPC backend has no ggml_backend_rpc_add_server\n");
        return false;
    }
    ggml_backend_register(add_server(endpoint.c_str()));
    return true;
}

// the token upstream's test feeds: any fixed, sequence-dependent stream will do
llama_token tok(int n_vocab, int seq, llama_pos pos) {
    return (llama_token) ((7u*(unsigned) pos + 31u*(unsigned) seq + 1u) % (unsigned) n_vocab);
}

void batch_add(llama_batch & b, llama_token t, llama_pos pos, llama_seq_id seq, bool logits) {
    b.token[b.n_tokens]     = t;
    b.pos[b.n_tokens]       = pos;
    b.n_seq_id[b.n_tokens]  = 1;
    b.seq_id[b.n_tokens][0] = seq;
    b.logits[b.n_tokens]    = logits;
    b.n_tokens++;
}

}  // namespace

int main(int argc, char ** argv) {
    options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr, "usage: %s MODEL [--rpc HOST:PORT | --gpu] [--n-prompt N] [--n-continue N] [--ctx N] "
                             "[--batch N] [--ubatch N] [--threads N]\n", argv[0]);
        return 2;
    }

    llama_backend_init();
    if (!o.rpc.empty() && !add_rpc(o.rpc)) {
        return 2;
    }

    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = o.rpc.empty() && !o.gpu ? 0 : 99;
    llama_model * model = llama_model_load_from_file(o.model.c_str(), mparams);
    if (model == nullptr) {
        std::fprintf(stderr, "failed to load %s\n", o.model.c_str());
        return 2;
    }

    constexpr int n_seqs = 2;
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx           = (uint32_t) o.n_ctx;
    cparams.n_batch         = (uint32_t) o.n_batch;
    cparams.n_ubatch        = (uint32_t) o.n_ubatch;
    cparams.n_seq_max       = n_seqs;
    cparams.kv_unified      = true; // only a unified cache shares cells on seq_cp
    cparams.n_threads       = o.n_threads;
    cparams.n_threads_batch = o.n_threads;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (ctx == nullptr) {
        std::fprintf(stderr, "failed to create the context\n");
        return 2;
    }

    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_batch batch = llama_batch_init(std::max(o.n_batch, n_seqs), 0, 1);

    for (int p0 = 0; p0 < o.n_prompt; p0 += o.n_batch) {
        batch.n_tokens = 0;
        for (int pos = p0; pos < std::min(p0 + o.n_batch, o.n_prompt); ++pos) {
            batch_add(batch, tok(n_vocab, 0, pos), pos, 0, pos + 1 == o.n_prompt);
        }
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "prompt decode failed at position %d\n", p0);
            return 1;
        }
    }

    // what llama-batched-bench does for -pps, and llama-server for a request with n_cmpl > 1
    llama_memory_seq_cp(llama_get_memory(ctx), 0, 1, -1, -1);

    for (int i = 0; i < o.n_continue; ++i) {
        const llama_pos pos = (llama_pos) (o.n_prompt + i);
        batch.n_tokens = 0;
        for (int s = 0; s < n_seqs; ++s) {
            batch_add(batch, tok(n_vocab, s, pos), pos, s, true);
        }
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "shared-seq decode failed at step %d\n", i);
            return 1;
        }
        for (int s = 0; s < n_seqs; ++s) {
            const float * logits = llama_get_logits_ith(ctx, s);
            if (logits == nullptr) {
                std::fprintf(stderr, "no logits for seq %d at step %d\n", s, i);
                return 1;
            }
            for (int t = 0; t < n_vocab; ++t) {
                if (!std::isfinite(logits[t])) {
                    std::fprintf(stderr, "non-finite logit at step %d, seq %d, token %d\n", i, s, t);
                    return 1;
                }
            }
        }
        if (i % 32 == 0) {
            std::printf("step %d pos %d\n", i, (int) pos);
            std::fflush(stdout);
        }
    }

    std::printf("shared-seq decode ok: %d tokens per sequence after seq_cp, %d sequences, last position %d\n",
                o.n_continue, n_seqs, o.n_prompt + o.n_continue - 1);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
