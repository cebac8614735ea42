"""The XLA flags the test suite compiles with, in one place: tests/conftest.py sets them (and says why each),
tests/doctor/doctor_env.py leaves out the ones the doctor's runs of example scripts must compile without."""

FUSION_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"
CODEGEN_UNSPLIT = "--xla_cpu_parallel_codegen_split_count=1"
SUITE = ("--xla_backend_optimization_level=0", FUSION_EMITTERS_OFF, CODEGEN_UNSPLIT)
#: the doctor's findings are thresholds on compile seconds: its example scripts keep XLA's emitters and split
NOT_FOR_THE_DOCTOR = (FUSION_EMITTERS_OFF, CODEGEN_UNSPLIT)
