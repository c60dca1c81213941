/* mlfw_last_error() after a call that succeeded is "", also when a callback of the caller's
 * called the C API during it and that call failed: the message belongs to the outer call. */
#include "CApiCheck.h"

static int failed_inside = 0;

/* An observer that asks the C API for something it refuses (a null scaler). */
static void FailingQuery(void* user, const mlfw_step_event* event) {
  (void)user;
  (void)event;
  float scale = 0.0f;
  if (mlfw_grad_scaler_get_scale(NULL, &scale) == MLFW_STATUS_NULL_ARGUMENT) {
    ++failed_inside;
  }
}

int main(void) {
  float weights[2] = {1.0f, 2.0f};
  float gradients[2] = {0.5f, 0.5f};
  float loss_value = 1.0f;
  int64_t shape[1] = {2};
  int64_t scalar_shape[1] = {1};
  DLTensor weight = CApiFloat32Vector(weights, shape);
  DLTensor gradient = CApiFloat32Vector(gradients, shape);
  DLTensor loss = CApiFloat32Vector(&loss_value, scalar_shape);
  const char* names[1] = {"w"};
  const DLTensor* parameters[1] = {&weight};
  const DLTensor* grads[1] = {&gradient};

  mlfw_grad_scaler_t scaler = NULL;
  CHECK_OK(mlfw_grad_scaler_create_static(4.0f, 1, &scaler));
  mlfw_observer_t observer = NULL;
  CHECK_OK(mlfw_observer_create(FailingQuery, NULL, &observer));
  CHECK_OK(mlfw_grad_scaler_add_observer(scaler, observer));
  mlfw_adam_options options;
  CHECK_OK(mlfw_adam_options_default(&options));
  mlfw_optimizer_t adam = NULL;
  CHECK_OK(mlfw_adam_create(names, parameters, 1, &options, &adam));

  DLManagedTensor* scaled = NULL;
  CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss, NULL, &scaled));
  scaled->deleter(scaled);
  CHECK_OK(mlfw_optimizer_set_gradients(adam, names, grads, 1));
  int stepped = 0;
  const mlfw_status status = mlfw_grad_scaler_step(scaler, adam, MLFW_STEP_AND_UPDATE, NULL, &stepped);
  CHECK(failed_inside == 1); /* the observer ran, and its call failed */
  CHECK(status == MLFW_STATUS_OK && stepped == 1);
  if (strcmp(mlfw_last_error(), "") != 0) {
    fprintf(stderr, "mlfw_grad_scaler_step succeeded but mlfw_last_error() is \"%s\"\n", mlfw_last_error());
    return 1;
  }

  CHECK_OK(mlfw_grad_scaler_remove_observer(scaler, observer, NULL));
  mlfw_observer_destroy(observer);
  mlfw_optimizer_destroy(adam);
  mlfw_grad_scaler_destroy(scaler);
  printf("c api error message ok\n");
  return 0;
}
