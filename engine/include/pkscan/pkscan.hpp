#pragma once
/// @file pkscan.hpp
/// Umbrella header of the pkscan library.

#include <pkscan/backend.hpp>
#include <pkscan/build_config.hpp>
#include <pkscan/checks.hpp>
#include <pkscan/dataset.hpp>
#include <pkscan/design.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <pkscan/events.hpp>
#include <pkscan/grid_gradient.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/options.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/predictor.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <pkscan/types.hpp>
#include <pkscan/vpc.hpp>
