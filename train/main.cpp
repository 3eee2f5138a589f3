// `train`: parses the configuration, runs training, and turns every failure into one line on
// stderr and a distinct exit code (train/exit_codes.h).
#include <iostream>

#include "train/config.h"
#include "train/exit_codes.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace vitddp;
  try {
    TrainConfig config;
    if (!parse_train_config(argc, argv, &config)) return kExitOk;
    RunResult result = run_training(config, std::cout);
    if (config.json) std::cout << result.to_json(config).dump() << std::endl;
    return kExitOk;
  } catch (const Error& e) {
    std::cerr << "train: error: " << e.what() << std::endl;
    return exit_code_for(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << "train: error: out of host memory" << std::endl;
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "train: internal error: " << e.what() << std::endl;
    return kExitInternal;
  }
}
