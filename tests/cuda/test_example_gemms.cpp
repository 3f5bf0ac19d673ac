// Every GEMM of the examples' training steps loads its operands with vectors (Note [GEMM tiles]
// and Note [Staged operands] in cuda/gemm.cu): one training step of each example's model, in fp16
// and bf16, at the examples' default sizes (a batch of two: the per-image and per-window shapes
// are the examples'), under a cuda::GemmRecorder. A call whose A or B would load element by
// element is listed with its sizes, its launcher and the operand's load width.
#include "tests/cuda/cuda_test.h"

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/gemm.h"
#include "examples/char_lstm_model.h"
#include "examples/cnn_train.h"
#include "examples/dcgan_model.h"
#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

constexpr int64_t kBatch = 2;

PrecisionOptions mixed(nn::Precision p) {
  PrecisionOptions o;
  o.precision = p;
  o.loss_scale = parse_loss_scale("backoff");
  return o;
}

// What an operand's load is, for the messages.
std::string load_name(int bytes, bool staged) {
  if (bytes == 0) return "element by element";
  if (bytes == cuda::kGemmNoFullChunk) return "no full 16-byte chunk (ragged edge only)";
  return std::to_string(bytes) + "-byte vectors" + (staged ? " (staged)" : "");
}

// Every recorded call, one line each, with a mark on those that load A or B element by element.
std::string describe(const std::vector<cuda::GemmCall>& calls, int& elementwise) {
  std::ostringstream out;
  elementwise = 0;
  for (const cuda::GemmCall& c : calls) {
    const bool slow = c.a_bytes == 0 || c.b_bytes == 0;
    elementwise += slow;
    out << (slow ? "  ELEMENT BY ELEMENT " : "  ") << c.caller << ": M " << c.M << ", N " << c.N << ", K " << c.K
        << ", batch " << c.batch << "; A " << load_name(c.a_bytes, c.a_staged) << ", B "
        << load_name(c.b_bytes, c.b_staged) << "\n";
  }
  return out.str();
}

void require_vector_loads(const cuda::GemmRecorder& recorder, const std::string& what) {
  const std::vector<cuda::GemmCall> calls = recorder.calls();
  int elementwise = 0;
  const std::string list = describe(calls, elementwise);
  INFO(what << ": " << calls.size() << " GEMM calls, " << elementwise
            << " of them load an operand element by element:\n"
            << list);
  CHECK(!calls.empty());
  CHECK(elementwise == 0);
}

// One AdamW step of the cnn (with the decoder head of --aux-weight) or the resnet on Fashion-MNIST
// shaped images [B, 1, 28, 28].
void cnn_step(examples::CnnModel model, nn::Precision precision) {
  Generator gen(1);
  examples::CnnConfig c;
  c.model = model;
  std::shared_ptr<nn::Sequential> net = examples::make_model(c, gen);
  std::shared_ptr<examples::CnnWithDecoder> with_decoder;
  nn::Module* root = net.get();
  if (model == examples::CnnModel::cnn) {
    with_decoder = std::make_shared<examples::CnnWithDecoder>(net, c.width, gen);
    root = with_decoder.get();
  }
  root->to(gpu());
  PrecisionTrainer trainer(*root, {.kind = OptimizerKind::adamw, .lr = 1e-3}, mixed(precision));
  const Tensor images = on_gpu(random({kBatch, 1, 28, 28}, DType::f32, 7, 0.0, 1.0));
  const Tensor labels = on_gpu(from_vector(std::vector<int64_t>{3, 8}, {kBatch}));

  cuda::GemmRecorder recorder;
  Tape tape;
  trainer.begin_step(tape);
  Variable logits, recon;
  if (with_decoder) std::tie(logits, recon) = with_decoder->forward(Variable(trainer.input(images)));
  else logits = (*net)(Variable(trainer.input(images)));
  Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), trainer.input(labels));
  if (recon.defined()) loss = loss + mse_loss(nn::fp32_input(OpId::mse_loss, recon), images) * 0.5;
  trainer.backward(tape, loss);
  trainer.step();
  REQUIRE(std::isfinite(loss.item()));
  require_vector_loads(recorder,
                       std::string(model == examples::CnnModel::cnn ? "cnn with its decoder head" : "resnet") + " " +
                           nn::precision_name(precision));
}

}  // namespace

TEST_CASE("cuda GEMMs of the cnn's and the resnet's training steps load their operands as vectors", "[cuda]") {
  MT_REQUIRE_GPU();
  for (nn::Precision p : {nn::Precision::fp16, nn::Precision::bf16}) {
    cnn_step(examples::CnnModel::cnn, p);
    cnn_step(examples::CnnModel::resnet, p);
  }
}

TEST_CASE("cuda GEMMs of char_lstm's training step load their operands as vectors", "[cuda]") {
  MT_REQUIRE_GPU();
  // The example's defaults: embedding 64, two LSTM layers of 256, and the fortunes corpus'
  // vocabulary of 114 bytes; windows of 16 characters, not 100: the window length only multiplies
  // the rows of the operands (their rows of 64, 256, 4 x 256 and 114 elements, and so their
  // alignment, do not depend on it), and each time step is a dozen launches, which the emulator's
  // deferred schedule makes slow.
  constexpr int64_t kVocab = 114, kSeqLen = 16;
  for (nn::Precision p : {nn::Precision::fp16, nn::Precision::bf16}) {
    Generator gen(2);
    examples::CharLSTM model(kVocab, examples::CharLSTMSize{}, gen);
    model.to(gpu());
    PrecisionTrainer trainer(model, {.kind = OptimizerKind::adam, .lr = 1e-3}, mixed(p));
    std::vector<int64_t> chars(size_t(kBatch * (kSeqLen + 1)));
    for (size_t i = 0; i < chars.size(); ++i) chars[i] = int64_t(i * 37 + 11) % kVocab;
    const Tensor ids = from_vector(chars, {kBatch, kSeqLen + 1});
    const Tensor input = on_gpu(ids.slice(1, 0, kSeqLen).contiguous());
    const Tensor target = on_gpu(ids.slice(1, 1, kSeqLen + 1).contiguous());

    cuda::GemmRecorder recorder;
    Tape tape;
    trainer.begin_step(tape);
    const Variable loss = examples::sequence_loss(model.forward(input, std::nullopt, compute_dtype(p)).logits, target);
    trainer.backward(tape, loss);
    trainer.step();
    REQUIRE(std::isfinite(loss.item()));
    require_vector_loads(recorder, std::string("char_lstm ") + nn::precision_name(p));
  }
}

TEST_CASE("cuda GEMMs of dcgan's training step load their operands as vectors", "[cuda]") {
  MT_REQUIRE_GPU();
  // The example's defaults on Fashion-MNIST: 32 x 32 images of one channel, nz 100, ngf = ndf = 32,
  // three stages.
  constexpr int64_t kNz = 100, kWidth = 32, kChannels = 1, kStages = 3, kSide = 32;
  for (nn::Precision p : {nn::Precision::fp16, nn::Precision::bf16}) {
    Generator gen(4);
    std::shared_ptr<nn::Sequential> G = examples::make_generator(kNz, kWidth, kChannels, kStages);
    std::shared_ptr<nn::Sequential> D = examples::make_discriminator(kWidth, kChannels, kStages);
    G->to(gpu());
    D->to(gpu());
    PrecisionTrainer g_trainer(*G, {.kind = OptimizerKind::adam, .lr = 2e-4}, mixed(p));
    PrecisionTrainer d_trainer(*D, {.kind = OptimizerKind::adam, .lr = 2e-4}, mixed(p));
    const Tensor real_labels = ones({kBatch, 1}, DType::f32, gpu()),
                 fake_labels = zeros({kBatch, 1}, DType::f32, gpu());
    const std::vector<Variable> d_params = D->parameters();
    const examples::GanNets nets{*G, *D, g_trainer, d_trainer, real_labels, fake_labels, d_params};
    const Tensor real = on_gpu(random({kBatch, kChannels, kSide, kSide}, DType::f32, 5));
    const Tensor z = on_gpu(random({kBatch, kNz, 1, 1}, compute_dtype(p), 6));

    cuda::GemmRecorder recorder;
    const examples::GanStepResult r = examples::gan_step(nets, real, z, [](examples::GanPhase) {});
    REQUIRE(std::isfinite(r.loss_d.item()));
    REQUIRE(std::isfinite(r.loss_g.item()));
    require_vector_loads(recorder, std::string("dcgan ") + nn::precision_name(p));
  }
}
