"""LangChain with memtape: a chat history kept on a memtape session, and memtape's search
as a retriever. Needs `pip install "memtape[langchain]"`. Run: python examples/langchain_history.py"""

from langchain_core.messages import AIMessage, HumanMessage

import memtape
from memtape.integrations.langchain import MemtapeChatMessageHistory, MemtapeRetriever

with memtape.Memtape.local() as m:
    history = MemtapeChatMessageHistory("langchain-demo", m)
    history.add_messages([HumanMessage("The spare key is under the blue flowerpot."), AIMessage("Got it.")])
    print([message.content for message in history.messages])

    retriever = MemtapeRetriever(client=m, k=1)
    for doc in retriever.invoke("where is the spare key?"):
        print(doc.metadata["session"], doc.page_content)
