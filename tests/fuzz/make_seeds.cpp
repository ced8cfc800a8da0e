// tests/fuzz/make_seeds.cpp — writes each fuzz target's seed inputs with sinter's own writers, so
// the seeds always have today's formats: `make_seeds DIR` fills DIR/<target>/
#include "fuzz_support.hpp"
#include "jit/data/idx.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "restore_model.hpp"

#include <cstring>
#include <iterator>

namespace {

namespace fs = std::filesystem;
using namespace sinter;

std::string read_all(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& file, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

std::string joined(const std::vector<std::string>& files) {
  std::string out;
  for (std::size_t i = 0; i < files.size(); ++i)
    out += (i ? std::string(fuzz::part_separator) : "") + files[i];
  return out;
}

void safetensors_seeds(const fs::path& out, const fs::path& work) {
  std::vector<std::pair<std::string, HostTensor>> owned;
  const std::vector<double> values{1, -2, 0.5, 3};
  for (DType t : all_dtypes)
    owned.emplace_back("t." + std::string(dtype_name(t)),
                       HostTensor::from_doubles(t, {2, 2}, values));
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (auto& [name, tensor] : owned)
    named.emplace_back(name, &tensor);
  save_safetensors(work / "typed.safetensors", named, {{"step", "12"}, {"epoch", "1"}});
  write(out / "every-dtype", read_all(work / "typed.safetensors"));
  save_safetensors(work / "empty.safetensors", {});
  write(out / "empty", read_all(work / "empty.safetensors"));
}

void checkpoint_seeds(const fs::path& out, const fs::path& work, const fs::path& safetensors_out) {
  fuzz::RestoreModel m;
  data::DataLoader inner(*m.blobs, fuzz::RestoreModel::loader_options);
  auto sifting = m.sifting(inner);
  data::Batch batch;
  sifting->next(batch); // leaves kept samples pending
  auto sift_state = sifting->state();
  NamedTensors extra;
  for (auto& [name, tensor] : sift_state)
    extra.emplace_back(name, &tensor);
  save_checkpoint(work / "whole.safetensors", m.model, m.step, {{"epoch", "0"}}, extra);
  const std::string whole = read_all(work / "whole.safetensors");
  write(out / "whole", whole);
  write(safetensors_out / "checkpoint", whole);

  // The same state as a 2-rank ZeRO save: AdamW's moments in two pieces, everything else in
  // the index (the layout save_sharded_checkpoint writes).
  Checkpoint ckpt = load_safetensors(work / "whole.safetensors");
  std::map<std::string, std::string> index_meta = ckpt.metadata;
  index_meta["sharded.files"] = "ck.step1.rank0-of-2.safetensors,ck.step1.rank1-of-2.safetensors";
  index_meta["sharded.save"] = "4242";
  index_meta["step"] = "1";
  NamedTensors in_index;
  std::vector<std::pair<std::string, HostTensor>> pieces[2];
  for (auto& [name, tensor] : ckpt.tensors) {
    if (!name.starts_with("optimizer.m.") && !name.starts_with("optimizer.v.")) {
      in_index.emplace_back(name, &tensor);
      continue;
    }
    std::string shape;
    for (int64_t d : tensor.shape())
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    index_meta["sharded.shape." + name] = shape;
    std::vector<double> flat = tensor.to_doubles();
    const std::size_t half = (flat.size() + 1) / 2;
    flat.resize(2 * half, 0.0);
    for (int r = 0; r < 2; ++r)
      pieces[r].emplace_back(name,
                             HostTensor::from_doubles(tensor.dtype(), {static_cast<int64_t>(half)},
                                                      std::span(flat).subspan(r * half, half)));
  }
  std::vector<std::string> files;
  save_safetensors(work / "ck.safetensors", in_index, index_meta);
  files.push_back(read_all(work / "ck.safetensors"));
  for (int r = 0; r < 2; ++r) {
    NamedTensors shard;
    for (auto& [name, tensor] : pieces[r])
      shard.emplace_back(name, &tensor);
    const fs::path file = work / ("ck.step1.rank" + std::to_string(r) + "-of-2.safetensors");
    save_safetensors(file, shard,
                     {{"format", "sinter-checkpoint-shard-v1"},
                      {"step", "1"},
                      {"rank", std::to_string(r)},
                      {"ranks", "2"},
                      {"sharded.save", "4242"}});
    files.push_back(read_all(file));
  }
  write(out / "sharded", joined(files));
}

void idx_seeds(const fs::path& out, const fs::path& work) {
  data::IdxArray images{data::IdxType::u8, {3, 28, 28}, {}};
  images.data.resize(3 * 28 * 28);
  for (std::size_t i = 0; i < images.data.size(); ++i)
    images.data[i] = static_cast<std::byte>(i * 7);
  data::IdxArray labels{data::IdxType::u8, {3}, {std::byte{1}, std::byte{9}, std::byte{0}}};
  for (bool gzip : {false, true}) {
    data::write_idx(work / "images", images, gzip);
    data::write_idx(work / "labels", labels, gzip);
    write(out / (gzip ? "fashion-gzip" : "fashion"),
          joined({read_all(work / "images"), read_all(work / "labels")}));
  }
  data::IdxArray floats{data::IdxType::f64, {2, 2}, {}};
  floats.data.resize(32, std::byte{0x3f});
  data::write_idx(work / "floats", floats, false);
  write(out / "f64", read_all(work / "floats"));
}

void text_seeds(const fs::path& out) {
  write(out / "fortune", std::string("\x07\x10", 2) +
                             "The best way to predict the future is to invent it.\n%\n"
                             "Simplicity is prerequisite for reliability.\n%\n");
  write(out / "short", std::string("\x05\x00", 2) + "abc");
}

void kernel_cache_seeds(const fs::path& out, const fs::path& work) {
  KernelCache cache(work / "cache");
  const CacheKey key{0x5151'7e57'0000'0001ull, 0x0123'4567'89ab'cdefull};
  const std::string object = "\x7f"
                             "ELF a kernel's object bytes";
  cache.store(key, object);
  write(out / "entry", read_all(cache.entry_path(key)));
}

void flag_seeds(const fs::path& out) {
  auto line = [](std::vector<std::string> args) {
    std::string s;
    for (const std::string& a : args)
      s += a + std::string(1, '\0');
    return s;
  };
  write(out / "numbers", line({"--steps", "100", "--lr=0.003", "--batch-size", "max"}));
  write(out / "switches", line({"--resume", "--check-numerics=false", "--checkpoint-dir", "d"}));
  write(out / "ranges", line({"--clip", "1e12", "--temperature=0.5", "--seed", "9"}));
}

/// Hugging Face folders of each family, written with the shapes transformers gives them:
/// config.json, then model.safetensors.
void pretrained_seeds(const fs::path& out, const fs::path& work) {
  auto folder = [&](const std::string& name, const std::string& config,
                    const std::vector<std::pair<std::string, Shape>>& shapes) {
    std::vector<std::pair<std::string, HostTensor>> owned;
    for (auto& [tensor, shape] : shapes) {
      HostTensor t(DType::f32, shape);
      for (int64_t i = 0; i < t.size(); ++i)
        t.set(i, 0.01 * static_cast<double>(i % 7));
      owned.emplace_back(tensor, std::move(t));
    }
    std::vector<std::pair<std::string, const HostTensor*>> named;
    for (auto& [tensor, t] : owned)
      named.emplace_back(tensor, &t);
    save_safetensors(work / (name + ".safetensors"), named);
    write(out / name, joined({config, read_all(work / (name + ".safetensors"))}));
  };
  const int64_t d = 4;
  std::vector<std::pair<std::string, Shape>> gpt2{{"transformer.wte.weight", {6, d}},
                                                  {"transformer.wpe.weight", {5, d}},
                                                  {"transformer.ln_f.weight", {d}},
                                                  {"transformer.ln_f.bias", {d}},
                                                  {"transformer.h.0.attn.bias", {1, 1, 5, 5}}};
  for (auto [part, in, out_width] :
       {std::tuple{"attn.c_attn", d, 3 * d}, std::tuple{"attn.c_proj", d, d},
        std::tuple{"mlp.c_fc", d, 4 * d}, std::tuple{"mlp.c_proj", 4 * d, d}}) {
    gpt2.push_back({"transformer.h.0." + std::string(part) + ".weight", {in, out_width}});
    gpt2.push_back({"transformer.h.0." + std::string(part) + ".bias", {out_width}});
  }
  for (const char* norm : {"ln_1", "ln_2"}) {
    gpt2.push_back({"transformer.h.0." + std::string(norm) + ".weight", {d}});
    gpt2.push_back({"transformer.h.0." + std::string(norm) + ".bias", {d}});
  }
  folder("gpt2",
         R"({"model_type": "gpt2", "vocab_size": 6, "n_positions": 5, "n_embd": 4, "n_layer": 1,
             "n_head": 2, "n_inner": null, "layer_norm_epsilon": 1e-05})",
         gpt2);
  // BERT's and ViT's encoder layers share their Linear and LayerNorm names.
  auto encoder_layer = [&](const std::string& attention, std::vector<std::string> norms) {
    std::vector<std::pair<std::string, Shape>> layer;
    std::string p = "encoder.layer.0.";
    for (const char* qkv : {"query", "key", "value"}) {
      layer.push_back({p + attention + "." + qkv + ".weight", {d, d}});
      layer.push_back({p + attention + "." + qkv + ".bias", {d}});
    }
    for (auto [linear, out_width, in] : {std::tuple{"attention.output.dense", d, d},
                                         std::tuple{"intermediate.dense", int64_t{8}, d},
                                         std::tuple{"output.dense", d, int64_t{8}}}) {
      layer.push_back({p + linear + ".weight", {out_width, in}});
      layer.push_back({p + linear + ".bias", {out_width}});
    }
    for (const std::string& norm : norms) {
      layer.push_back({p + norm + ".weight", {d}});
      layer.push_back({p + norm + ".bias", {d}});
    }
    return layer;
  };
  auto bert = encoder_layer("attention.self", {"attention.output.LayerNorm", "output.LayerNorm"});
  for (auto [tensor, shape] :
       {std::pair{"embeddings.word_embeddings.weight", Shape{6, d}},
        std::pair{"embeddings.position_embeddings.weight", Shape{5, d}},
        std::pair{"embeddings.token_type_embeddings.weight", Shape{2, d}},
        std::pair{"embeddings.LayerNorm.weight", Shape{d}},
        std::pair{"embeddings.LayerNorm.bias", Shape{d}},
        std::pair{"pooler.dense.weight", Shape{d, d}}, std::pair{"pooler.dense.bias", Shape{d}}})
    bert.push_back({tensor, shape});
  folder("bert",
         R"({"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 6,
             "max_position_embeddings": 5, "hidden_size": 4, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 8, "hidden_act": "gelu"})",
         bert);
  auto vit = encoder_layer("attention.attention", {"layernorm_before", "layernorm_after"});
  for (auto [tensor, shape] :
       {std::pair{"embeddings.cls_token", Shape{1, 1, d}},
        std::pair{"embeddings.position_embeddings", Shape{1, 5, d}},
        std::pair{"embeddings.patch_embeddings.projection.weight", Shape{d, 1, 2, 2}},
        std::pair{"embeddings.patch_embeddings.projection.bias", Shape{d}},
        std::pair{"layernorm.weight", Shape{d}}, std::pair{"layernorm.bias", Shape{d}},
        std::pair{"classifier.weight", Shape{3, d}}, std::pair{"classifier.bias", Shape{3}}})
    // ViTForImageClassification: the classifier beside the `vit.` encoder.
    vit.push_back(
        {(std::string(tensor).starts_with("classifier") ? "" : "vit.") + std::string(tensor),
         shape});
  for (auto& [tensor, shape] : vit)
    if (tensor.starts_with("encoder.")) tensor = "vit." + tensor;
  folder("vit",
         R"({"model_type": "vit", "architectures": ["ViTForImageClassification"],
             "image_size": 4, "patch_size": 2, "num_channels": 1, "hidden_size": 4,
             "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8,
             "id2label": {"0": "a", "1": "b", "2": "c"}})",
         vit);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR (writes DIR/<target>/ seed inputs)\n");
    return 2;
  }
  const fs::path out = argv[1], work = fuzz::scratch();
  safetensors_seeds(out / "safetensors", work);
  checkpoint_seeds(out / "checkpoint", work, out / "safetensors");
  idx_seeds(out / "idx", work);
  text_seeds(out / "text");
  kernel_cache_seeds(out / "kernel_cache", work);
  flag_seeds(out / "flags");
  pretrained_seeds(out / "pretrained", work);
  return 0;
}
