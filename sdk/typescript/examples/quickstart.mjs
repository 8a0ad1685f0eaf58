import { Memtape } from 'memtape';

// The server at MEMTAPE_URL (default http://127.0.0.1:7077), with MEMTAPE_API_KEY if it has keys.
const client = new Memtape({ agent: 'quickstart' });

await client.sessions.append('chat-1', { role: 'user', content: 'I prefer green tea.' });
await client.sessions.append('chat-1', { role: 'assistant', content: 'Noted: green tea.' });
const { messages } = await client.sessions.history('chat-1');
const { hits } = await client.search({ q: 'green tea' });
const saved = await client.memory.save({ content: '- prefers green tea\n' });

console.log(`${messages.length} messages; best hit: "${hits[0]?.entry.payload.content}"; memory v${saved.version}`);
