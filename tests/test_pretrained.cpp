// tests/test_pretrained.cpp — weights by other libraries' names: layouts, refusals, config.json
#include "dsl/sinter.hpp"
#include "jit/io/json.hpp"

#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

using namespace sinter;
using sinter::testing::TempDir;
namespace fs = std::filesystem;

namespace {

HostTensor counting(Shape shape, double start = 0.0) {
  HostTensor t(DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i)
    t.set(i, start + static_cast<double>(i));
  return t;
}

void write(const fs::path& file, const std::vector<std::pair<std::string, HostTensor>>& tensors) {
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (auto& [name, t] : tensors)
    named.emplace_back(name, &t);
  save_safetensors(file, named);
}

void write_text(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

/// A scheme reading parameter `p` from the tensors and layout given.
WeightNames one_source(TensorSource source) {
  return {.family = "test",
          .prefixes = {""},
          .source = [source](const std::string&) -> std::optional<TensorSource> { return source; },
          .ignorable = [](const std::string& n) { return n == "buffer"; },
          .tied = {}};
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing was refused)";
}

} // namespace

TEST_CASE("json::parse_document reads whole documents; parse keeps the header subset",
          "[pretrained]") {
  json::Value v = json::parse_document(
      R"({"a": -1.5e2, "b": true, "c": null, "d": [0.25, 7], "e": false, "f": 12})");
  CHECK(v.find("a")->is(json::Value::Kind::number));
  CHECK(v.find("a")->number == -150.0);
  CHECK(v.find("b")->boolean);
  CHECK(v.find("c")->is(json::Value::Kind::null));
  CHECK(v.find("d")->elements[0].number == 0.25);
  CHECK(v.find("d")->elements[1].is(json::Value::Kind::integer));
  CHECK_FALSE(v.find("e")->boolean);
  CHECK(v.find("f")->integer == 12);
  CHECK(v.find("f")->number == 12.0);
  CHECK(v.find("g") == nullptr);
  for (const char* bad : {"01", "1.", "-", "1e", "tru", "[1,]", "{\"a\":1}x", "1e999"})
    CHECK_THROWS_AS(json::parse_document(bad), json::ParseError);
  CHECK_THROWS_AS(json::parse("true"), json::ParseError);
  CHECK_THROWS_AS(json::parse("-1"), json::ParseError);
  CHECK_THROWS_AS(json::parse("1.5"), json::ParseError);
}

TEST_CASE("read_named_weights lays tensors out: transposed, packed, patches, flattened, zeros",
          "[pretrained]") {
  TempDir dir;
  fs::path file = dir.path / "w.safetensors";
  write(file, {{"lin", counting({2, 3})},
               {"q", counting({2, 3})},
               {"k", counting({1, 3}, 10)},
               {"v", counting({2, 3}, 20)},
               {"qb", counting({2})},
               {"kb", counting({1}, 10)},
               {"vb", counting({2}, 20)},
               {"conv", counting({2, 1, 2, 2})},
               {"token", counting({1, 1, 3})}});
  auto read = [&](TensorSource source, Shape shape) {
    WantedTensor w{"p", DType::f32, shape};
    return read_named_weights(file, {&w, 1}, one_source(std::move(source)), false)[0];
  };
  HostTensor t = read({{"lin"}, TensorLayout::transposed}, {3, 2});
  CHECK(t.to_doubles() == std::vector<double>{0, 3, 1, 4, 2, 5});
  t = read({{"q", "k", "v"}, TensorLayout::packed_transposed}, {3, 5});
  // Row i: q[:, i], k[:, i], v[:, i].
  CHECK(t.to_doubles() ==
        std::vector<double>{0, 3, 10, 20, 23, 1, 4, 11, 21, 24, 2, 5, 12, 22, 25});
  t = read({{"qb", "kb", "vb"}, TensorLayout::packed_transposed}, {5});
  CHECK(t.to_doubles() == std::vector<double>{0, 1, 10, 20, 21});
  t = read({{"conv"}, TensorLayout::conv_patches}, {4, 2});
  CHECK(t.to_doubles() == std::vector<double>{0, 4, 1, 5, 2, 6, 3, 7});
  t = read({{"token"}, TensorLayout::flattened}, {3});
  CHECK(t.to_doubles() == std::vector<double>{0, 1, 2});
  t = read({{}, TensorLayout::zeros}, {2});
  CHECK(t.to_doubles() == std::vector<double>{0, 0});
  // Converted to the parameter's dtype.
  WantedTensor half{"p", DType::bf16, {3}};
  HostTensor h = read_named_weights(file, {&half, 1},
                                    one_source({{"token"}, TensorLayout::flattened}), false)[0];
  CHECK(h.dtype() == DType::bf16);
  CHECK(h.to_doubles() == std::vector<double>{0, 1, 2});
}

TEST_CASE("read_named_weights refuses, naming the tensor: missing, misshapen, non-finite, "
          "unread, untied",
          "[pretrained]") {
  TempDir dir;
  fs::path file = dir.path / "w.safetensors";
  HostTensor bad = counting({2});
  bad.set(1, std::nan(""));
  write(file, {{"a", counting({2, 3})}, {"bad", bad}, {"buffer", counting({1})}});
  WantedTensor w{"p", DType::f32, {3, 2}};
  std::string e =
      refusal([&] { read_named_weights(file, {&w, 1}, one_source({{"nope"}}), false); });
  CHECK_THAT(e,
             Catch::Contains("'nope'") && Catch::Contains("'p'") && Catch::Contains("config.json"));
  e = refusal([&] { read_named_weights(file, {&w, 1}, one_source({{"a"}}), false); });
  CHECK_THAT(e, Catch::Contains("'a'") && Catch::Contains("[2,3]") && Catch::Contains("'p'"));
  WantedTensor v{"p", DType::f32, {2}};
  e = refusal([&] { read_named_weights(file, {&v, 1}, one_source({{"bad"}}), false); });
  CHECK_THAT(e, Catch::Contains("bad") && Catch::Contains("nan"));
  // Strict: 'bad' is read by nothing ('buffer' is ignorable).
  e = refusal([&] {
    read_named_weights(file, {&w, 1}, one_source({{"a"}, TensorLayout::transposed}), true);
  });
  CHECK_THAT(e, Catch::Contains("1 tensor(s)") && Catch::Contains("'bad'") &&
                    Catch::Contains(".strict = false"));
  CHECK_NOTHROW(
      read_named_weights(file, {&w, 1}, one_source({{"a"}, TensorLayout::transposed}), false));

  // A tied copy must equal its original.
  fs::path tied = dir.path / "tied.safetensors";
  write(tied, {{"wte.weight", counting({4, 2})}, {"lm_head.weight", counting({4, 2}, 1)}});
  WantedTensor table{"tokens.weight", DType::f32, {4, 2}};
  WeightNames gpt2_tokens_only = hf::gpt2;
  e = refusal([&] { read_named_weights(tied, {&table, 1}, gpt2_tokens_only, true); });
  CHECK_THAT(e, Catch::Contains("'lm_head.weight' differs from 'wte.weight'") &&
                    Catch::Contains("tie_word_embeddings"));
  write(tied, {{"wte.weight", counting({4, 2})}, {"lm_head.weight", counting({4, 2})}});
  CHECK_NOTHROW(read_named_weights(tied, {&table, 1}, gpt2_tokens_only, true));
}

TEST_CASE("hf configs: config.json read into sinter configurations, bad ones refused by key",
          "[pretrained]") {
  TempDir dir;
  write_text(dir.path / "config.json", R"({"model_type": "gpt2", "vocab_size": 97,
    "n_positions": 24, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": null,
    "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
    "architectures": ["GPT2LMHeadModel"]})");
  GPTConfig g = hf::gpt2_config(dir.path / "model.safetensors");
  CHECK(g.vocab == 97);
  CHECK(g.context == 24);
  CHECK(g.tied_head);
  CHECK(g.mlp_hidden == 0);
  CHECK(g.activation == Activation::gelu);
  CHECK(&hf::names_for(dir.path) == &hf::gpt2);
  std::string e = refusal([&] { hf::vit_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"model_type\"") && Catch::Contains("gpt2"));
  write_text(dir.path / "config.json", R"({"model_type": "gpt2", "vocab_size": 97,
    "n_positions": 24, "n_embd": 32, "n_layer": 2, "n_head": 3})");
  e = refusal([&] { hf::gpt2_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"n_head\" is 3, which does not divide \"n_embd\" (32)"));
  write_text(dir.path / "config.json", R"({"model_type": "gpt2", "vocab_size": 0,
    "n_positions": 24, "n_embd": 32, "n_layer": 2, "n_head": 4})");
  e = refusal([&] { hf::gpt2_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"vocab_size\" is 0: it must be at least 1"));
  write_text(dir.path / "config.json", R"({"model_type": "gpt2", "vocab_size": 5,
    "n_positions": 24, "n_embd": 32, "n_layer": 2, "n_head": 4, "layer_norm_epsilon": -1})");
  e = refusal([&] { hf::gpt2_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"layer_norm_epsilon\" must be above 0"));

  write_text(dir.path / "config.json", R"({"model_type": "roberta", "vocab_size": 99,
    "max_position_embeddings": 42, "type_vocab_size": 1, "hidden_size": 32,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 1,
    "architectures": ["RobertaForMaskedLM"]})");
  BertConfig b = hf::bert_config(dir.path);
  CHECK(b.position_offset == 2);
  CHECK(b.context == 40);
  CHECK_FALSE(b.pooler);
  CHECK(b.norm_eps == 1e-12);

  write_text(dir.path / "config.json", R"({"model_type": "bert", "vocab_size": 9,
    "max_position_embeddings": 8, "hidden_size": 4, "num_hidden_layers": 1,
    "num_attention_heads": 1, "intermediate_size": 8, "hidden_act": "swish"})");
  e = refusal([&] { hf::bert_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"hidden_act\"") && Catch::Contains("swish"));
  write_text(dir.path / "config.json", R"({"model_type": "bert", "vocab_size": 9})");
  e = refusal([&] { hf::bert_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("\"max_position_embeddings\" is missing"));
  write_text(dir.path / "config.json", "{\"model_type\": \"bert\",");
  e = refusal([&] { hf::bert_config(dir.path); });
  CHECK_THAT(e, Catch::Contains("config.json is not valid JSON"));
  e = refusal([&] { hf::gpt2_config(dir.path / "elsewhere" / "model.safetensors"); });
  CHECK_THAT(e, Catch::Contains("cannot open") && Catch::Contains("save_pretrained"));
}

TEST_CASE("optional modules: a ViT's class token, pooler and head exist as configured",
          "[pretrained]") {
  Init init(3);
  auto names = [](auto& model) {
    std::vector<std::string> out;
    for_each_parameter(model, [&](const std::string& n, Parameter&) { out.push_back(n); });
    return out;
  };
  ViT plain({.image = 8, .patch = 4, .dim = 8, .depth = 1, .heads = 2, .classes = 3}, init);
  std::vector<std::string> plain_names = names(plain);
  CHECK(std::find(plain_names.begin(), plain_names.end(), "cls") == plain_names.end());
  CHECK(plain_names.back() == "head.bias");
  ViT hf_like({.image = 8,
               .patch = 4,
               .dim = 8,
               .depth = 1,
               .heads = 2,
               .classes = 0,
               .class_token = true,
               .pooler = true},
              init);
  std::vector<std::string> hf_names = names(hf_like);
  CHECK(hf_names[2] == "cls");
  CHECK(hf_like.position.value.shape() == Shape{5, 8});
  CHECK(hf_names.back() == "pooler.bias");
  GPT tied({.vocab = 11, .context = 4, .dim = 8, .depth = 1, .heads = 2, .tied_head = true}, init);
  std::vector<std::string> gpt_names = names(tied);
  CHECK(gpt_names.back() == "norm.beta");
  // The tied head's logits are the states times the token table transposed.
  auto logits = compile_eval(tied, [](GPT& m, Var ids) { return m(ids); });
  HostTensor ids = HostTensor::from<int32_t>(DType::i32, {1, 2}, {3, 7});
  CHECK(logits(ids).shape() == Shape{1, 2, 11});
}

namespace {

template <class Model> std::vector<std::vector<double>> values_of(Model& model) {
  std::vector<std::vector<double>> out;
  for_each_parameter(
      model, [&](const std::string&, Parameter& p) { out.push_back(p.value.to_doubles()); });
  return out;
}

} // namespace

TEST_CASE("hf::save_pretrained writes what the configuration readers and load_weights read back",
          "[pretrained]") {
  TempDir dir;
  Init init(11);
  GPTConfig g{.vocab = 13, .context = 6, .dim = 8, .depth = 2, .heads = 2, .tied_head = true};
  GPT gpt(g, init);
  hf::save_pretrained(dir.path / "gpt2", gpt, g);
  GPTConfig g2 = hf::gpt2_config(dir.path / "gpt2");
  CHECK((g2.vocab == 13 && g2.context == 6 && g2.dim == 8 && g2.depth == 2 && g2.heads == 2));
  CHECK(g2.tied_head);
  Init none = Init::for_loading();
  GPT gpt_again(g2, none);
  load_weights(hf::weights_file(dir.path / "gpt2"), gpt_again, {.names = hf::gpt2});
  CHECK(values_of(gpt_again) == values_of(gpt));

  ViTConfig v{.image = 8,
              .patch = 4,
              .dim = 8,
              .depth = 1,
              .heads = 2,
              .classes = 3,
              .channels = 3,
              .class_token = true,
              .activation = Activation::gelu_exact,
              .norm_eps = 1e-12};
  ViT vit(v, init);
  hf::save_pretrained(dir.path / "vit", vit, v);
  ViTConfig v2 = hf::vit_config(dir.path / "vit");
  CHECK((v2.classes == 3 && v2.channels == 3 && v2.class_token && !v2.pooler));
  CHECK(v2.norm_eps == 1e-12);
  ViT vit_again(v2, none);
  load_weights(hf::weights_file(dir.path / "vit"), vit_again, {.names = hf::vit});
  CHECK(values_of(vit_again) == values_of(vit));

  BertConfig b{.vocab = 17,
               .context = 7,
               .type_vocab = 1,
               .dim = 8,
               .depth = 1,
               .heads = 2,
               .position_offset = 2};
  Bert roberta(b, init);
  hf::save_pretrained(dir.path / "roberta", roberta, b);
  CHECK(&hf::names_for(dir.path / "roberta") == &hf::roberta);
  BertConfig b2 = hf::bert_config(dir.path / "roberta");
  CHECK((b2.context == 7 && b2.position_offset == 2 && b2.pooler));
  Bert roberta_again(b2, none);
  load_weights(hf::weights_file(dir.path / "roberta"), roberta_again, {.names = hf::roberta});
  CHECK(values_of(roberta_again) == values_of(roberta));

  // What transformers' models cannot hold is refused by name.
  ViTConfig mean_pooled{.image = 8, .patch = 4, .dim = 8, .depth = 1, .heads = 2, .classes = 3};
  ViT averaging(mean_pooled, init);
  CHECK_THAT(refusal([&] { hf::save_pretrained(dir.path / "mean", averaging, mean_pooled); }),
             Catch::Contains("class_token = true"));
  GPTConfig untied = g;
  untied.tied_head = false;
  GPT with_bias(untied, init);
  CHECK_THAT(refusal([&] { hf::save_pretrained(dir.path / "untied", with_bias, untied); }),
             Catch::Contains("'head.bias'") && Catch::Contains("not all zeros"));
  CHECK(hf::detail::activation_name(Activation::gelu) == "gelu_new");
  CHECK(json_number(1e-12) == "1e-12");
  CHECK(json_number(2.0) == "2.0");
}
