"""The system under test (§4.1): the endpoint and what it is (``system``), one adapter per server
kind (``adapters``: detection, request fields, response extensions, configuration; llama.cpp's
build-and-run tool under ``adapters/llamacpp``), and child processes that die with the parent
(``children``)."""
