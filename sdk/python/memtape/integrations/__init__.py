"""memtape behind the agent frameworks people use: the OpenAI Agents SDK (`openai_agents`)
and LangChain (`langchain`). Each module imports its framework, installed with the extra
of the same name (`pip install "memtape[openai-agents]"`, `"memtape[langchain]"`)."""
