#include <mlframework/distributed/Float8Amax.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>

namespace mlframework::distributed::fsdp {

void FSDP::AgreeAmax(fp8::IScalingRecipe& recipe) { AllReduceAmax(ProcessGroup(), recipe); }

}  // namespace mlframework::distributed::fsdp
