"""The transport-free core: types, errors, config, model API, DAG and executor."""
