-- The queue's keys, in the order corral._keys.SCRIPT_KEY_SUFFIXES passes them to every script.
local K_WAIT = KEYS[1]
local K_PAUSED = KEYS[2] -- not used by the BullMQ 6.x layout; kept for data of older versions
local K_ACTIVE = KEYS[3]
local K_PRIORITIZED = KEYS[4]
local K_PC = KEYS[5]
local K_DELAYED = KEYS[6]
local K_WAITING_CHILDREN = KEYS[7]
local K_COMPLETED = KEYS[8]
local K_FAILED = KEYS[9]
local K_MARKER = KEYS[10]
local K_EVENTS = KEYS[11]
local K_META = KEYS[12]
local K_STALLED = KEYS[13]
local K_STALLED_CHECK = KEYS[14]
local K_LIMITER = KEYS[15]
local K_ID = KEYS[16]
local rcall = redis.call
